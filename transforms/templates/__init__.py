"""The helpers a migrated module carries, as real Python source: one file per helper.

Each file is plain public JAX from its marker comment (`# pmap-migrate: helper ...`) to its
end; what comes before (this kind of docstring, imports a test needs) is never emitted.
transforms/helpers/helper_templates.py reads these files as text, never imports them, so the
transform path stays free of JAX; the tests import them and run them on fake devices. A spelling that
depends on the target JAX is one visible block:

    # pmap-migrate: if target >= 0.6.1
    ...code for targets from 0.6.1 on...
    # pmap-migrate: else
    ...code for older targets...
    # pmap-migrate: end

A module with multi-process evidence gets the `# pmap-migrate: if multiprocess` blocks (the
`else` branch, or nothing, for every other module): one template, two variants, no copy.
Importing a template runs the first branch of every block: current JAX, multi-process variant
(which, in one process, is the single-process program).
"""
