"""Command-line shells around the pure cores: they read files and streams and write to the terminal,
which the cores (hooks/shared, hooks/<kind>) never do. One module per installed command."""
