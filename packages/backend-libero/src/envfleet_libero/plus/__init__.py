"""LIBERO-plus in the LIBERO backend: its data (:mod:`.data`), its perturbations (:mod:`.camera`,
:mod:`.robot`, :mod:`.noise`) and the suites and options built on them (:mod:`.suites`)."""
