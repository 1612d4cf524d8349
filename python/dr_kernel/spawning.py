"""One lock for every child process this package starts.

A tuning process starts children from several threads at once: the compile pool forks its
workers from the thread that dispatches compiles, while a measuring process is started by
subprocess.Popen in a background thread (so that its start overlaps the first compiles). A fork
taken while another thread is inside Popen copies Popen's half-made state into the new worker:
the pipe on which Popen waits to hear that its child has started (kept open by the fork until
that worker exits, so Popen waits for it: on the H200 a tuning hung for minutes), and the child's
end of the new process's socket (so that its death goes unnoticed). Every start, forked or not,
holds START_LOCK from creating the child's socket to closing the parent's copy of it.
"""

import threading

START_LOCK = threading.Lock()
