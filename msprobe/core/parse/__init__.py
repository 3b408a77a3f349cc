"""``msprobe parse``: inspect single dumped arrays without a framework (numpy only).

* :mod:`.arrays` - load a ``.npy`` / ``.pt`` file safely, its summary, the element-wise compare of two arrays;
* :mod:`.pkl` - the statistics of one API from a dump.json (or a legacy ``.pkl`` JSON-lines dump);
* :mod:`.convert` - ``dc``: Ascend kernel dumps through CANN's ``msaccucmp.py``, ``.pt`` -> ``.npy`` without it;
* :mod:`.render` - the reference's rich tables and panels;
* :mod:`.shell` - the ``Parse >>>`` shell and the one-shot commands of the CLI.
"""
