"""A test app whose management commands use ``lock_command`` and ``LockedCommand``.

Installed by the ``testapp`` fixture in ``tests/test_commands.py``; child processes use
``tests.support.testapp.settings`` (the test settings plus this app).
"""
