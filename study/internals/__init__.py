"""Every place the study reaches into a dependency's private parts, one module per dependency.

A private name (``_get_sqlalchemy_store``, ``ray._private…``, ``threading._shutdown``) or an
internal module (``ray.tune.execution.class_cache``) may move or vanish in any release of its
package. Each is reached here only, through a small named function or constant with a comment on
why it is needed and what happens when it is gone, so that a new release is checked in one place
(``tests/study/test_internals.py`` fails when one no longer resolves):

- :mod:`study.internals.mlflow`: building an embedded store as MLflow does, MLflow's default
  artifact root, the SQLAlchemy engine behind a client.
- :mod:`study.internals.ray`: Ray's system config, the logger of its token-authentication
  notice, Tune's environment variables for its trial actors.
- :mod:`study.internals.torch`: the module the first optimizer of every trial imports.
- :mod:`study.internals.python`: ending the process as the interpreter does, without its
  module teardown.

Checked against MLflow 3.17.2, Ray 2.60.0, PyTorch 2.14.1 and CPython 3.11.7. The analysis has
its own (``analysis/internals.py``): it never imports the study.

Each module imports its dependency only inside its functions (MLflow's import is seconds, and a
command that only reads a store does without it), so importing these modules costs nothing.
"""
