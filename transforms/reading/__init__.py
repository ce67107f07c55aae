"""What reads a module: qualified names, the prefilter, pmap bindings, snippets, layout edits."""
