"""The helpers a migrated module carries, as real Python source: one file per helper.

Each file is plain public JAX from its marker comment (`# pmap-migrate: helper ...`) to its
end; what comes before (this kind of docstring, imports a test needs) is never emitted.
transforms/helpers/helper_templates.py reads these files as text, never imports them, so the
transform path stays free of JAX; the tests import them and run them on fake devices. A spelling
that depends on the target JAX is one visible block:

    # pmap-migrate: if target >= 0.6.1
    ...code for targets from 0.6.1 on...
    # pmap-migrate: else
    ...code for older targets...
    # pmap-migrate: end

A module gets the `# pmap-migrate: if FEATURE` blocks of the features its sites use
(`static`, `donate`, `devices`, `committed`, `multiprocess`; `if multiprocess and committed`,
`if not static`: see transforms/helpers/helper_features.py), the `else` branch, or nothing, for
the others: one template, its variants, no copy. Importing a template runs every block in
order, so a `not FEATURE` block comes before the code that replaces it, and the import is the
variant with every feature (which, in one process, is the single-process program).
"""
