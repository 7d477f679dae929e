#!/usr/bin/env python
"""``make demo``: migrate, create the demo admin, start Redis if needed, serve the site.

1. ``REDIS_URL`` unset: start an embedded real server (see ``embedded_redis.py``) on a free
   loopback port; it is stopped when the demo stops. Set ``REDIS_URL`` (and optionally
   ``REDLOCK_URLS``, comma-separated) to use your own servers; ``DEMO_REDLOCK_NODES=3``
   starts three more embedded servers for Redlock.
2. Migrate the sqlite database (``demo_site/var/demo.sqlite3``).
3. Create (or reset) the superuser ``admin`` (``DEMO_ADMIN_USER``) with the password in
   ``DEMO_ADMIN_PASSWORD``, or a generated one, printed below.
4. Start the background workers that hold locks (``manage.py demo_workers``), the
   election candidates and a Celery worker (the Celery page).
5. Serve on http://127.0.0.1:8000/ (``PORT``, ``HOST`` to change) until Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MANAGE = HERE / "manage.py"


def _say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


def _start_servers(redlock_nodes: int) -> tuple[list[object], dict[str, object]]:
    """Embedded servers for what the environment does not provide; the state to share."""
    from demo_site.embedded_redis import start_embedded

    servers: list[object] = []
    url = os.environ.get("REDIS_URL")
    redlock = [u for u in os.environ.get("REDLOCK_URLS", "").split(",") if u.strip()]
    label = "REDIS_URL"
    if not url:
        server = start_embedded()
        servers.append(server)
        url = server.url
        label = f"embedded {server.spec.name} ({server.spec.source}), pid {server.pid}"
        _say(f"started {server.spec.flavor}-server {server.spec.version} at {url}")
    else:
        _say(f"using REDIS_URL={url}")
    if not redlock and redlock_nodes:
        for _ in range(redlock_nodes):
            node = start_embedded()
            servers.append(node)
            redlock.append(node.url)
        _say(f"started {redlock_nodes} Redlock nodes: {', '.join(redlock)}")
    return servers, {"url": url, "redlock_urls": redlock, "label": label}


def _setup_database(user: str, password: str) -> None:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)
    from django.contrib.auth import get_user_model

    model = get_user_model()
    admin, _ = model.objects.get_or_create(username=user, defaults={"email": f"{user}@example.com"})
    admin.is_staff = admin.is_superuser = admin.is_active = True
    admin.set_password(password)
    admin.save()


def _wait_for_http(url: str, process: subprocess.Popen[bytes], deadline: float) -> bool:
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--workers", type=int, default=3, help="background lock holders (0-3)")
    parser.add_argument(
        "--candidates", type=int, default=3, help="leader-election candidates (Election page)"
    )
    parser.add_argument(
        "--redlock-nodes", type=int, default=int(os.environ.get("DEMO_REDLOCK_NODES", "0"))
    )
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "demo_site.settings"
    var_dir = Path(os.environ.get("DEMO_VAR_DIR") or HERE / "var")
    var_dir.mkdir(parents=True, exist_ok=True)
    state_file = var_dir / "servers.json"

    children: list[subprocess.Popen[bytes]] = []
    servers: list[object] = []

    def stop(*_: object) -> None:
        raise KeyboardInterrupt

    # Ctrl-C and SIGTERM both stop everything (set explicitly: a shell that starts us in
    # the background hands us SIGINT ignored).
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        servers, state = _start_servers(args.redlock_nodes)
        # Children and ``manage.py`` in another terminal find the servers here.
        state_file.write_text(json.dumps(state))
        pythonpath = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(pythonpath),
            REDIS_URL=str(state["url"]),
            REDLOCK_URLS=",".join(state["redlock_urls"]),  # type: ignore[arg-type]
            DEMO_SERVER_LABEL=str(state["label"]),
        )

        user = os.environ.get("DEMO_ADMIN_USER", "admin")
        password = os.environ.get("DEMO_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        _setup_database(user, password)

        # The Election page's candidates (a fresh election: forget the last run's), and
        # the Semaphore and Read-write lock pages' workers (started from the pages) of the last
        # run forgotten.
        shutil.rmtree(var_dir / "election", ignore_errors=True)
        shutil.rmtree(var_dir / "semaphore", ignore_errors=True)
        shutil.rmtree(var_dir / "rwlock", ignore_errors=True)
        for number in range(1, args.candidates + 1):
            label = f"candidate-{number}"
            command = [sys.executable, str(MANAGE), "election_candidate", "--label", label]
            children.append(subprocess.Popen(command, env=env))
        for slot in range(1, min(args.workers, 3) + 1):
            children.append(
                subprocess.Popen(
                    [sys.executable, str(MANAGE), "demo_workers", "--slot", str(slot)], env=env
                )
            )
        # The Celery page's worker: five slots, so that five enqueues would run at once.
        celery = [sys.executable, "-m", "celery", "-A", "demo_site.demo.tasks", "worker"]
        celery += ["--pool", "threads", "-c", "5", "-l", "warning", "--without-gossip"]
        children.append(subprocess.Popen(celery, env=env, cwd=ROOT))
        address = f"{args.host}:{args.port}"
        server = subprocess.Popen(
            [sys.executable, str(MANAGE), "runserver", address, "--noreload", "--skip-checks"],
            env=env,
        )
        children.append(server)
        url = f"http://{address}/"
        if not _wait_for_http(url, server, time.monotonic() + 60):
            _say("the web server did not start; see the messages above")
            return 1
        line = "=" * 64
        print(
            f"\n{line}\n  django-redislock demo: {url}\n"
            f"  admin:    {url}admin/  user {user!r}  password {password!r}\n"
            f"  redis:    {state['url']}  ({state['label']})\n"
            f"  Ctrl-C stops the site, the workers and the embedded server.\n{line}\n",
            flush=True,
        )
        return server.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # let the clean-up finish
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for child in reversed(children):
            if child.poll() is None:
                child.terminate()
        for child in children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        for embedded in servers:
            embedded.close()  # type: ignore[attr-defined]
        state_file.unlink(missing_ok=True)
        _say("stopped")


if __name__ == "__main__":
    sys.exit(main())
