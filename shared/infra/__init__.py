"""The plumbing every feature leans on: settings, the bootstrap that wires a process, the
database, the broker and job queue, live streams, metrics and logs, the embedded servers,
and the keys that seal stored secrets. Nothing here decides a rule of the design."""
