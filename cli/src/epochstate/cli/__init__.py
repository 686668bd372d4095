"""The ``epochstate`` command line: reads, alignment control, the daemon and the demos."""
