"""The application on top of the library: the study, the ``posenc`` command and the pictures.

* :mod:`posenc.app.study`: the length-extrapolation and context-extension studies (train short,
  test long), as a Python API;
* :mod:`posenc.app.cli`: the ``posenc`` command (``extrapolate``, ``extend``, ``plot``, ``list``,
  ``describe``, ``models``), also ``python -m posenc``;
* :mod:`posenc.app.hf_zoo`: every model type of the installed transformers checked against posenc
  (what ``posenc models`` prints and ``tests/hf/test_zoo.py`` asserts);
* :mod:`posenc.app.plots`: pictures of the encodings and of the studies' results (matplotlib).

The application is a layer on top: it uses only posenc's public API (the names in
``posenc.__all__`` and in its public submodules' ``__all__``), and the library never imports it
(``tests/app/test_layering.py`` checks both). Importing this package imports nothing else.
"""
