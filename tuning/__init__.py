"""distir.tuning: deciding how to run a program.

``schedule.py`` is the Python schedule API (CoCoNet's scheduling language: ``Schedule``,
``PAPER_SCHEDULES``), which sits above the runtime because ``Schedule.check`` runs the
interpreter.
"""
