"""The ``hub-export`` command line: one module per command, thin over the library."""
