"""tpufeed's tests, a package like each of their folders: two folders may hold files of the same
name, no folder's name (`run`, `ops`, `transforms`) becomes a top-level module, and the shared
modules import by their full name (`from tests.processes import worker_processes`)."""
