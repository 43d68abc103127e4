"""The model's commands: `abhed doctor` (can Abhed work here), `abhed models` (the profiles) and
`abhed conformance` (may this model serve traffic). Thin over cli/doctor.py, model/profiles.py and
the conformance part (its categories, thresholds, suite and report)."""

from __future__ import annotations

import json
import itertools
import sys
from pathlib import Path

import click

from abhed.cli import base
from abhed.cli.agent_cmd import FormatChoice, open_model
from abhed.common import formats
from abhed.common.terminal import printable


@click.command()
@click.option("--endpoint", help="Model server to check (default: model.endpoint).")
@click.option("--model", "model_name", help="Served model id to check (default: the first the server lists).")
@click.option("--profile", help="Model profile to use (default: chosen from the model id).")
def doctor(endpoint: str | None, model_name: str | None, profile: str | None) -> None:
    """Check that Abhed can work here: model server, model, context, tool calling, sandbox, rg.

    Each line says OK, or what is wrong and how to fix it. Exit status 0 when nothing failed.
    """
    from abhed.cli import launch
    from abhed.cli.doctor import checks, site_policy_check
    policy = site_policy_check()  # a policy that cannot be trusted stops everything: then said alone
    if policy.status == "FAIL":
        click.echo(printable(f"{policy.status:<5} {policy.name:<13} {policy.message}"))
        sys.exit(1)
    try:
        settings = launch.settings(endpoint=endpoint, model=model_name, profile=profile)
    except launch.LaunchError as exc:
        base.fail(str(exc))
    failed = False
    for check in itertools.chain(checks(settings), [policy]):
        click.echo(printable(f"{check.status:<5} {check.name:<13} {check.message}"))  # the server's words too
        failed = failed or check.status == "FAIL"
    sys.exit(1 if failed else 0)


@click.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the profiles as JSON.")
def models(name: str | None, as_json: bool) -> None:
    """List the model profiles (offline_models/), or show one: window, format, sampling, vllm flags."""
    from abhed.model import profiles
    settings = base.settings()
    try:
        loaded = profiles.load(settings.model.profiles_dir)
        chosen = [profiles.choose("", loaded, name)[0]] if name else sorted(loaded.values(), key=lambda p: p.name)
    except profiles.ProfileError as exc:
        base.fail(str(exc))
    if as_json:
        click.echo(json.dumps([p.model_dump() for p in chosen], indent=1))
        return
    if name:
        profile = chosen[0]
        for key, value in profile.model_dump(exclude={"sampling", "notes", "vllm_serve"}).items():
            described = f": {formats.get(value).description}" if key in ("tool_format", "text_format") else ""
            click.echo(f"{key:<18} {value}{described}")
        click.echo(f"{'sampling':<18} {profile.sampling.fields()}")
        click.echo(f"\nServe it with:\n  {profile.vllm_serve}\n\n{profile.notes}")
        from abhed.conformance.report import one_line, saved
        reports = saved(profile.name, settings.home)
        if reports:
            click.echo("\nConformance (abhed conformance --save):\n" + "\n".join(f"  {one_line(r)}" for r in reports))
        return
    for profile in chosen:
        fmt = profile.tool_format + (f" (text: {profile.text_format})" if profile.tool_format == "native" else "")
        if profile.vision:
            fmt += f"  images: {profile.vision.max_images} a request, in {profile.vision.placement} messages"
        click.echo(f"{profile.name:<14} {profile.family:<20} {profile.context_window:>7} ctx {profile.max_output_tokens:>6} "
                   f"out  {fmt}")
        click.echo(f"{'':<14} {profile.vllm_serve}")


@click.command()
@click.option("--endpoint", help="Model server to test (default: model.endpoint).")
@click.option("--model", "model_name", help="Served model id to test (default: the first the server lists).")
@click.option("--profile", help="Model profile to use (default: chosen from the model id).")
@click.option("--tool-format", type=FormatChoice(),
              help="How tool calls travel (default: the profile's, falling back to text without a tool parser).")
@click.option("--only", help="Categories to run, comma-separated: adapter, scenarios, recovery (default: all).")
@click.option("--repeat", type=click.IntRange(1, 20), default=1, show_default=True,
              help="Run each test this many times (a sampled model does not answer the same way twice).")
@click.option("--threshold", "thresholds", multiple=True, metavar="CATEGORY=SCORE",
              help="Override a category's pass threshold, e.g. --threshold scenarios=1.0.")
@click.option("--json", "json_path", metavar="FILE", help="Write the JSON report to FILE (- for stdout; the table "
              "then goes to stderr).")
@click.option("--save", is_flag=True, help="Save the JSON report under $ABHED_HOME/conformance, one file per run "
              "(`abhed models NAME` lists them).")
@click.option("--save-to", type=click.Path(file_okay=False, path_type=Path), help="Save the JSON report in this "
              "directory instead.")
@click.option("--keep", is_flag=True, help="Keep the throwaway workspaces and sessions (their path is printed).")
@click.option("--verbose", is_flag=True, help="Show every tool call of every test on stderr.")
def conformance(endpoint: str | None, model_name: str | None, profile: str | None, tool_format: str | None,
                only: str | None, repeat: int, thresholds: tuple[str, ...], json_path: str | None, save: bool,
                save_to: Path | None, keep: bool, verbose: bool) -> None:
    """Decide whether a model may serve traffic: the conformance suite against a real endpoint.

    Layer 1 (adapter): one call of each of the nine tools must parse and validate; then one
    markup-heavy edit per text protocol (text:hermes, text:qwen3_coder), counted only for the
    protocol the model's calls travel in (else shown as informative). Layer 2
    (scenarios, recovery): real tasks in throwaway workspaces, judged by their outcome on disk;
    the recovery tasks provoke errors and measure how often the model's next call is fixed by the
    error text alone. Prints a table (and --json, a JSON report). Exit status: 0 the model passes,
    1 it does not (or the model server failed), 2 bad invocation.
    """
    import shutil
    import tempfile

    from abhed.cli import launch
    from abhed.conformance import report as reports
    from abhed.conformance import suite
    from abhed.cli.display import Progress

    try:
        categories, limits = reports.chosen(only, thresholds)
    except ValueError as exc:
        base.fail(str(exc))
    try:
        settings = launch.settings(endpoint=endpoint, model=model_name, profile=profile, tool_format=tool_format)
    except launch.LaunchError as exc:
        base.fail(str(exc))
    out = sys.stderr if json_path == "-" else sys.stdout
    model = open_model(settings, Progress())
    root = Path(tempfile.mkdtemp(prefix="abhed-conformance-")).resolve()

    def progress(test) -> None:
        click.echo(f"{test.category:<10} {test.name:<18} {'PASS' if test.passed else 'FAIL'}  "
                   f"({test.turns} replies, {test.tool_errors} tool errors)", err=True)

    options = suite.Options(categories=categories, repeat=repeat, thresholds=limits, on_test=progress)
    if verbose:
        options.display = lambda name: Progress()
    try:
        click.echo(printable(f"abhed conformance: {model.describe()}; workspaces in {root}"), err=True)
        report = suite.run(settings, model, root, options)
    except KeyboardInterrupt:
        click.echo("abhed: conformance interrupted; no verdict", err=True)
        sys.exit(130)
    finally:
        model.client.close()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    click.echo(printable(reports.table(report)), file=out)
    if keep:
        click.echo(f"Workspaces and sessions kept in {root} (ABHED_HOME={root / 'home'} abhed sessions show ID).",
                   err=True)
    text = report.model_dump_json(indent=1)
    if json_path == "-":
        click.echo(text)
    elif json_path:
        Path(json_path).write_text(text + "\n")
    for directory in ([save_to] if save_to else []) + ([reports.reports_dir(settings.home)] if save else []):
        try:
            click.echo(f"Saved the report to {reports.save(report, directory)}", err=True)
        except OSError as exc:
            click.echo(f"abhed: cannot save the report in {directory}: {exc.strerror or exc}. Use --save-to DIR, or "
                       "--json FILE.", err=True)
            sys.exit(1)
    sys.exit(0 if report.passed else 1)
