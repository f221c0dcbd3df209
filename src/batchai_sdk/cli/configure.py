"""``batchai configure``: the profile (backend for new workspaces, its options, defaults)."""

from __future__ import annotations

import argparse

from ._context import Context, Result, UsageError
from ._format import OUTPUT_FORMATS


def configure(ctx: Context, args: argparse.Namespace) -> Result | None:
    data = ctx.profile.data
    changed = False
    if args.backend:
        data["backend"] = args.backend
        changed = True
    sections = {
        "local": {"root": args.root},
        "ssh": {
            "hosts": args.hosts,
            "user": args.user,
            "key_file": args.key_file,
            "share_root": args.share_root,
            "port": args.port,
            "known_hosts": args.known_hosts,
            "trust_on_first_use": args.trust_on_first_use,
            "jump_host": args.jump_host,
        },
        "azure": {"subscription_id": args.subscription, "location": args.location},
    }
    for section, values in sections.items():
        for key, value in values.items():
            if value is not None:
                data.setdefault(section, {})[key] = value
                changed = True
    for item in args.defaults or ():
        key, sep, value = item.partition("=")
        if not sep or key not in ("group", "workspace", "experiment", "output"):
            raise UsageError(
                f"--defaults takes KEY=VALUE, KEY one of group, workspace, experiment, output; got {item!r}"
            )
        if key == "output" and value and value not in OUTPUT_FORMATS:
            raise UsageError(f"--defaults output={value}: expected one of {', '.join(OUTPUT_FORMATS)}")
        defaults = data.setdefault("defaults", {})
        if value:
            defaults[key] = value
        else:
            defaults.pop(key, None)
        changed = True
    if changed:
        ctx.profile.save()
    return Result({"path": str(ctx.profile.path), "backend": ctx.profile.backend, **data})
