// Little-endian binary records with a running checksum, shared by the model files of this room.
#ifndef DR_KERNEL_SRC_RL_BINARY_IO_H_
#define DR_KERNEL_SRC_RL_BINARY_IO_H_

#include <cstdint>
#include <cstring>
#include <istream>
#include <ostream>
#include <string>

#include "dr_kernel/rl/mlp.h"

namespace dr_kernel::rl::internal {

// FNV-1a over every byte written or read since construction.
class Checksum {
 public:
  void Add(const unsigned char* bytes, size_t count) {
    for (size_t i = 0; i < count; ++i) {
      hash_ ^= bytes[i];
      hash_ *= 0x100000001b3ULL;
    }
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

// Writes a record: a magic tag, then fields, then the checksum of everything before it.
class BinaryWriter {
 public:
  BinaryWriter(std::ostream& out, const char (&magic)[8]) : out_(out) { Bytes(magic, 8); }

  void U32(uint32_t v) { Unsigned(v, 4); }
  void U64(uint64_t v) { Unsigned(v, 8); }
  void F64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    Unsigned(bits, 8);
  }
  // Writes the checksum; the record is complete after this.
  void Finish() {
    const uint64_t sum = checksum_.value();
    unsigned char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(sum >> (8 * i));
    out_.write(reinterpret_cast<const char*>(bytes), 8);
  }

 private:
  void Unsigned(uint64_t v, int width) {
    unsigned char bytes[8];
    for (int i = 0; i < width; ++i) bytes[i] = static_cast<unsigned char>(v >> (8 * i));
    Bytes(reinterpret_cast<const char*>(bytes), width);
  }
  void Bytes(const char* bytes, size_t count) {
    checksum_.Add(reinterpret_cast<const unsigned char*>(bytes), count);
    out_.write(bytes, static_cast<std::streamsize>(count));
  }

  std::ostream& out_;
  Checksum checksum_;
};

// Reads a record written by BinaryWriter; every failure is a ModelFormatError that names `what`
// (e.g. "an MLP") and the field being read.
class BinaryReader {
 public:
  BinaryReader(std::istream& in, const char (&magic)[8], std::string what) : in_(in), what_(std::move(what)) {
    char got[8];
    if (!in_.read(got, 8)) {
      Fail("the stream ended before the header; the file is empty or truncated");
    }
    if (std::memcmp(got, magic, 8) != 0) {
      Fail("the stream does not start with the '" + std::string(magic, 6) +
           "' header, so it is not such a dr_kernel model file (or it is corrupt)");
    }
    checksum_.Add(reinterpret_cast<const unsigned char*>(got), 8);
  }

  // Reads the format version and fails unless it is between 1 and `newest`, the one this build writes.
  uint32_t Version(uint32_t newest) {
    const uint32_t version = U32("the format version");
    if (version == 0 || version > newest) {
      Fail("the file has format version " + std::to_string(version) + " but this build reads version " +
           std::to_string(newest) + "; use the dr_kernel that wrote it or save the model again");
    }
    return version;
  }

  uint32_t U32(const char* field) { return static_cast<uint32_t>(Unsigned(4, field)); }
  uint64_t U64(const char* field) { return Unsigned(8, field); }
  double F64(const char* field) {
    const uint64_t bits = Unsigned(8, field);
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  // Reads the trailing checksum and compares it with what was read.
  void Finish() {
    const uint64_t expected = checksum_.value();
    unsigned char bytes[8];
    if (!in_.read(reinterpret_cast<char*>(bytes), 8)) {
      Fail("the stream ended before the checksum; the file is truncated, save the model again");
    }
    uint64_t got = 0;
    for (int i = 0; i < 8; ++i) got |= static_cast<uint64_t>(bytes[i]) << (8 * i);
    if (got != expected) Fail("the checksum does not match; the file is corrupt, save the model again");
  }
  [[noreturn]] void Fail(const std::string& why) const {
    throw ModelFormatError("Cannot load " + what_ + ": " + why + ".");
  }

 private:
  uint64_t Unsigned(int width, const char* field) {
    unsigned char bytes[8];
    if (!in_.read(reinterpret_cast<char*>(bytes), width)) {
      Fail(std::string("the stream ended while reading ") + field +
           "; the file is truncated, save the model again");
    }
    checksum_.Add(bytes, static_cast<size_t>(width));
    uint64_t v = 0;
    for (int i = 0; i < width; ++i) v |= static_cast<uint64_t>(bytes[i]) << (8 * i);
    return v;
  }

  std::istream& in_;
  std::string what_;
  Checksum checksum_;
};

}  // namespace dr_kernel::rl::internal

#endif  // DR_KERNEL_SRC_RL_BINARY_IO_H_
