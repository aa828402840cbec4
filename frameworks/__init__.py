"""distir.frameworks: distir inside training frameworks.

``pytorch.py``: distributed optimizers with the ``torch.optim`` contract and distir
programs as ``torch.library`` custom ops (DESIGN §6). Floor: above ``tuning`` and
``synthesis``, below ``tools``. Never a module named after the framework it imports.
"""
