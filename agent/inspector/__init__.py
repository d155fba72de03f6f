"""Reading a run after it finished (or while it runs): the report and its plots, the patch review and its PRs,
the audit, replay and fork, the timeline, the list of runs, and the local UI over all of them.

Nothing here drives the loop: every module reads what a run wrote (its trace, checkpoints, summary, benchmark
records and git branches) and renders it. The loop itself is the rest of ``agent/``.
"""
