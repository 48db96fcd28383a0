"""The node's machinery: the facade (``node``), the data plane's rooms and both hot-path
twins. Nothing here is API: users import from ``aoz`` and its public modules, and these
modules may change freely. docs/ARCHITECTURE.md says what each room owns."""
