"""``git iterare execute PROMPT``."""

from __future__ import annotations

import click

from git_iterare.cli.agent_options import agent_option
from git_iterare.cli.context import app, docker_network_options, project_option
from git_iterare.cli.numbers import VERBOSITY, Number


@click.command("execute")
@click.argument("prompt")
@click.option("--follow", "-f", is_flag=True,
              help="Stream the agent's log and exit 0 if the run succeeded, 1 if not.")
@click.option("--env", "-e", "env_names", multiple=True, metavar="NAME",
              help="Pass the host variable NAME into the sandbox (repeatable).")
@click.option("--reuse", "-r", metavar="RUN", help="Start from the result of run RUN.")
@agent_option("--agent", what="Agent to run")
@click.option("--branch", metavar="BASE",
              help="Base branch or commit (default: frontmatter, then HEAD).")
@click.option("--name", metavar="NAME",
              help="Run name (default: frontmatter workspace, then the prompt).")
@click.option("--timeout", type=Number("seconds", whole=True, zero="no limit"),
              metavar="SECONDS",
              help="Wall-clock limit in seconds; 0 for none (default: run.timeout).")
@click.option("--max-budget-usd", "max_budget_usd",
              type=Number("US dollars", whole=False, zero="no limit"),
              metavar="DOLLARS", help="Stop the run when the agent has spent this much; 0 for "
                                      "no limit (default: run.max_budget_usd).")
@click.option("--max-turns", "max_turns", type=Number("turns", whole=True, zero="no limit"),
              metavar="N",
              help="Stop the run after N model turns; 0 for no limit (default: "
                   "run.max_turns).")
@click.option("--until", metavar="CHECK",
              help="Loop: after the agent ends, run CHECK (a shell command) in the sandbox; "
                   "while it fails, the agent goes again with its output (default: the "
                   "prompt's until, then run.until).")
@click.option("--max-rounds", "max_rounds", type=Number("rounds", whole=True, minimum=1),
              metavar="N",
              help="With --until: rounds at most (default: run.max_rounds, 5).")
@click.option("--stall-after", "stall_after", type=Number("rounds", whole=True, zero="never"),
              metavar="K",
              help="With --until: end the loop as stalled after K rounds in a row with the "
                   "same failing check output or the same tree; 0 for never (default: "
                   "run.stall_after, 2).")
@click.option("-v", "--verbosity", type=VERBOSITY, metavar="LEVEL", default=0, show_default=True,
              help="With --follow: 0 what the agent says, 1 tool calls, 2 everything.")
@click.option("-n", "--attempts", "attempts", type=Number("attempts", whole=True, minimum=1),
              default=1, metavar="N", help="Run the prompt N times from the same base, as "
                                             "one group to compare (`git iterare compare`).")
@click.option("--jobs", "-j", "jobs", type=Number("attempts at once", whole=True, minimum=1),
              metavar="J", help="With -n: run at most J attempts at once (default: the "
                                "engine's CPUs divided by docker.cpus).")
@docker_network_options()
@project_option()
def command(prompt: str, follow: bool, env_names: tuple[str, ...], reuse: str | None,
            agent: str | None, branch: str | None, name: str | None, timeout: int | None,
            max_budget_usd: float | None, max_turns: int | None, until: str | None,
            max_rounds: int | None, stall_after: int | None, verbosity: int,
            networks: tuple[str, ...], compose: bool, attempts: int, jobs: int | None) -> None:
    """Run PROMPT (a name under .iterare/prompts, or a path) in a sandbox."""
    import sys

    from git_iterare import ui
    from git_iterare.errors import ExitCode
    from git_iterare.runner.interrupts import RunGoesOn
    from git_iterare.runner.launch import ExecuteRequest, execute
    from git_iterare.runs.loops import loop_of

    ctx = app()
    request = ExecuteRequest(prompt=prompt, env_names=env_names, reuse=reuse, agent=agent,
                             branch=branch, name=name, timeout=timeout,
                             max_budget_usd=max_budget_usd, max_turns=max_turns,
                             networks=networks, compose=compose, until=until,
                             max_rounds=max_rounds, stall_after=stall_after)
    if attempts > 1:
        from git_iterare.cli.attempts import execute_group

        execute_group(request, attempts, jobs, follow)
        return
    run_id, looping = None, False
    try:
        record = execute(ctx.repo, ctx.config, request, progress=ui.progress)
        run_id = record.id
        click.echo(f"{ui.paint('started', 'green')} run {record.id} on branch {record.branch}")
        looping = loop_of(record) is not None
        if not follow or looping:
            _watch(record.id)  # and a loop's driver
        if not follow:
            click.echo(f"follow it with: `git iterare log -f {record.id}`")
            return
        from git_iterare.cli.log import follow_and_exit
    except KeyboardInterrupt as exc:
        # Once the run started, Ctrl-C leaves it going: say which run, as log -f does.
        run_id = exc.run_id if isinstance(exc, RunGoesOn) else run_id
        if run_id is None:
            raise
        _goes_on(run_id)
    stop_it = (lambda: _stop_loop(record.id)) if looping else None
    try:
        follow_and_exit(record.id, verbosity=verbosity, raw=False, exit_status=True,
                        interrupted=stop_it)
    except KeyboardInterrupt:  # before following began, or a second Ctrl-C
        if stop_it is not None:
            stop_it()
        _goes_on(record.id)
    sys.exit(ExitCode.OK)


def _stop_loop(run_id: str) -> None:
    """Ctrl-C while following a loop ends it (a loop's rounds go on only while someone
    wants them): stopped, with the work of its rounds kept; exit 130."""
    import sys

    from git_iterare import ui
    from git_iterare.cli.stop import stopped_line
    from git_iterare.errors import ExitCode
    from git_iterare.runner.interrupts import end_on_next_interrupt
    from git_iterare.runner.manage import stop

    end_on_next_interrupt()
    ui.warn(f"interrupted: stopping run {run_id}, the work of its rounds kept")
    record = stop(app().repo, run_id, 10)
    click.echo(stopped_line(record), err=True)
    sys.exit(ExitCode.INTERRUPTED)


def _goes_on(run_id: str) -> None:
    """Say that Ctrl-C left run ``run_id`` going; exit 130."""
    import sys

    from git_iterare.cli.log import interrupted_line
    from git_iterare.errors import ExitCode
    from git_iterare.runner.interrupts import end_on_next_interrupt

    end_on_next_interrupt()
    _watch(run_id)
    click.echo(interrupted_line(run_id, "interrupted"), err=True)
    sys.exit(ExitCode.INTERRUPTED)


def _watch(run_id: str) -> None:
    """Have run ``run_id``, which nobody follows from now on, finished when its agent ends
    (:mod:`git_iterare.runner.watch`); a loop's watcher drives its rounds."""
    from git_iterare.runner.watch import watch

    watch(app().repo, run_id)
