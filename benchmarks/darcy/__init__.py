"""The Darcy race of ``benchmarks/darcy_compare.py`` as importable modules.

- :mod:`darcy.meshes`: the domains, their mesh families and the data sets solved on them;
- :mod:`darcy.peers`: the adapters of other libraries' models (neuralop's FNO through a grid and
  GINO, PhysicsNeMo's Transolver);
- :mod:`darcy.race`: every model trained for a budget and scored;
- :mod:`darcy.report`: tables, markdown and figures of the results.

The modules import sibling scripts of ``benchmarks/`` (``physicsnemo_transolver``): import them with
that folder on ``sys.path``, as the scripts run there have it.
"""
