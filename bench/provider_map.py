"""bench/provider_map ([4.2]): what each process's check of the org-to-model map costs, every
REFRESH_S (5 s), with many orgs on their own models: the whole map read again (before
[4.2]: `org_models`, every key already open, as a refresh that finds nothing changed) beside
the version read that replaced it (`models_version`; the map only when it moved), in one run.

`--orgs` orgs each set their own model (PUT /agents-api/provider, through `set_provider`);
then each check runs `--checks` times in a unit of work of its own, as a process's refresh
does. A fleet of P processes runs P checks (two: the chat and the embeddings' routers) every
5 s, so the database's work per 5 s is P x 2 x a check.

    .venv/bin/python -m bench.provider_map [--orgs 10000] [--checks 50]

The last line is machine-readable.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable

from cryptography.fernet import Fernet

from bench.common import BenchEnv, arguments, bench_env, describe, machine
from shared.auth.models import Org
from shared.infra.db.uow import UnitOfWork
from shared.infra.sealing import SecretBox
from shared.providers.service import models_version, org_models, set_provider


def orgs_with_own_models(env: BenchEnv, box: SecretBox, count: int) -> None:
    with env.uow() as uow:
        orgs = [Org(name=f"own-{uuid.uuid4().hex[:12]}") for _ in range(count)]
        uow.session.add_all(orgs)
        uow.session.flush()
        for org in orgs:
            set_provider(
                uow=uow, org_id=org.id, base_url=None, api_key=f"sk-{org.id.hex}",
                model="org-model", box=box, allow_private=False,
            )  # fmt: skip
        uow.commit()


def timed(env: BenchEnv, check: Callable[[UnitOfWork], object], times: int) -> list[float]:
    """Milliseconds of each `check`, each in a unit of work of its own (a refresh's)."""
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        with env.uow() as uow:
            check(uow)
        samples.append(1000 * (time.perf_counter() - started))
    return samples


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--orgs", type=int, default=10_000, help="orgs on their own models")
    parser.add_argument("--checks", type=int, default=50, help="checks timed, each way")
    args = parser.parse_args()
    host = machine()
    env = bench_env(args.admin_database_url)
    box = SecretBox(Fernet.generate_key().decode())
    orgs_with_own_models(env, box, args.orgs)
    with env.uow() as uow:
        known = org_models(uow=uow, box=box, known={})  # the process's map, keys open
    assert len(known) == args.orgs

    whole = timed(env, lambda uow: org_models(uow=uow, box=box, known=known), args.checks)
    version = timed(env, lambda uow: models_version(uow=uow), args.checks)

    ratio = statistics.median(whole) / statistics.median(version)
    print(
        f"bench/provider_map: one process's check of the org-to-model map, {args.orgs} orgs on"
        f" their own models, {args.checks} checks each way"
    )
    print(f"  machine: {host}")
    print(f"  whole map (before [4.2]):  {describe(whole)}   {args.orgs} rows")
    print(f"  version ([4.2]):           {describe(version)}   1 row")
    print(f"  the version check is {ratio:.0f}x cheaper (medians)")
    print(
        f"provider_map orgs={args.orgs} whole_p50_ms={statistics.median(whole):.2f}"
        f" version_p50_ms={statistics.median(version):.3f} ratio={ratio:.0f}"
    )


if __name__ == "__main__":
    main()
