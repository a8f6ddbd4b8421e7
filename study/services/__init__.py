"""What each ``study`` command does, apart from its typer command in :mod:`study.cli`.

A service reads (or writes) what its command asks for, refuses with
:class:`~search_spaces.spec.StudyError` saying why, and returns what is printed: values or
lines. The command in ``study/cli.py`` parses the options, calls its service, prints, and turns
a StudyError into exit 2 (``error: …`` on stderr). One module per command:

========================  ==================================================================
``study plan``            :mod:`study.services.plan`
``study power``           :mod:`study.services.power_answer`
``study status``          :mod:`study.services.status`
``study list``            :mod:`study.services.list_studies`
``study export``          :mod:`study.services.export_results`
``study report``          :mod:`study.reporting` (``make_report``)
``study augment``, next   :mod:`study.sequential` (``augment_study``, ``next_study``)
``study run``             :mod:`study.runner` (``run_study``)
========================  ==================================================================

:mod:`study.services.recorded` opens a recorded study as these commands read it. Each module
imports what is heavy (the record, MLflow, the analysis, pyarrow, torch) inside the functions
that need it, and says so in its docstring: ``import study.cli`` stays light, and a command that
only reads imports neither MLflow nor torch.
"""
