// Which bundled table files a benchmark reads. The matmul tables of the four problems recorded
// first: matmul.jsonl holds 4096^3 and 8192x2048x1024; 1024^3 and 16x4096x4096 were recorded again
// on the H200 (their first recording could not rank its best configs: docs/data-format.md) into
// files of their own.
#ifndef DR_KERNEL_BENCHMARKS_FIRST_TABLES_H_
#define DR_KERNEL_BENCHMARKS_FIRST_TABLES_H_

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

inline std::vector<std::string> FirstMatmulFiles(const std::string& dir) {
  return {dir + "/matmul.jsonl", dir + "/matmul_1024x1024x1024_fp16.jsonl",
          dir + "/matmul_16x4096x4096_fp16.jsonl"};
}

// Every table file (*.jsonl) in `dir`, sorted: all the bundled tables, as the shipped agent's model
// learns them.
inline std::vector<std::string> AllTableFiles(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".jsonl") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

#endif  // DR_KERNEL_BENCHMARKS_FIRST_TABLES_H_
