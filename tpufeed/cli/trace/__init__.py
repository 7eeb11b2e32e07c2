"""`tpufeed trace merge`: the hosts' trace files as one timeline of the pod.

- `command`: the subcommand's arguments and what it prints;
- `merge`: the two passes over the files and the merged file's writing;
- `alignment`: where each file lies on the pod's clock (pure arithmetic on its metadata), and
  how close the merged files are;
- `reader`: a Chrome trace-event file read as a stream, in bounded memory.
"""
