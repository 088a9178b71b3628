"""One module per benchmark section; each has a ``run()`` that measures, prints and writes its figures."""
