"""Limits on everything git iterare reads back from a sandbox (the agent controls it all),
and on the files a repository keeps in ``.iterare/`` (its author controls those).

Each limit is a named constant here, and git-iterare-execute(1) lists each one with its
value in its LIMITS section (a test checks they agree). Sizes are bytes.

The agent writes the run's worktree and gitdir, its output, and (through its lookups) the
resolver's log; a run that hits a limit still finishes: what exceeds it is skipped, cut or
counted, with a note, and everything else is kept. A repository file over its limit is
refused with one line naming it, before anything is started.
"""

from __future__ import annotations

MiB = 1024 * 1024

# -- the run gitdir -----------------------------------------------------------------------
#: Largest loose ref file read (a ref is 41 bytes).
MAX_REF_FILE_BYTES = 4096
#: Largest ``packed-refs`` file read.
MAX_PACKED_REFS_BYTES = 4 * MiB
#: Largest object imported, decompressed (checked while inflating, and against the size a
#: loose object or pack entry declares before inflating it). Also the largest file of the
#: worktree the automatic commit takes.
MAX_OBJECT_BYTES = 100 * MiB
#: Most objects imported from the run gitdir in one finish.
MAX_IMPORT_OBJECTS = 200_000
#: Most commits imported from the run gitdir in one finish.
MAX_IMPORT_COMMITS = 10_000
#: Most bytes (decompressed) imported from the run gitdir in one finish.
MAX_IMPORT_BYTES = 2048 * MiB
#: Objects are written to the repository in batches of at most this many bytes, so the
#: import holds no more than this (plus one object) in memory.
IMPORT_BATCH_BYTES = 32 * MiB
#: Longest delta chain followed in a pack the agent wrote.
MAX_DELTA_CHAIN = 1000
#: Most entries in one tree object imported.
MAX_TREE_ENTRIES = 100_000

# -- the run worktree ---------------------------------------------------------------------
#: Deepest directory the automatic commit takes (the top is depth 0); deeper ones are
#: skipped with a note.
MAX_TREE_DEPTH = 1700
#: Longest path (relative to the worktree, bytes) the automatic commit takes; directories
#: and files with longer paths are skipped with a note. Less when the worktree's own path
#: is long: the whole path must stay under the system's PATH_MAX (4096).
MAX_PATH_BYTES = 3500
#: Most paths the automatic commit leaves out by an exclude line (files over the size
#: limit, directories over the depth or path limits); beyond it the worktree is not
#: committed at all (git matches every such line against every path).
MAX_EXCLUDED_PATHS = 10_000
#: Most skipped paths named in the notes of a run (the rest are counted).
MAX_SKIPPED_NAMED = 50

# -- a remote run's trees, fetched from its engine ----------------------------------------
#: Most bytes of files read from the engine for each of a run's worktree and run gitdir
#: (those not written counted too); a tree over it is not fetched at all (the worktree's
#: base is kept, with the agent's commits).
MAX_FETCH_BYTES = 4096 * MiB
#: Most entries read from the engine for each of those trees (the same).
MAX_FETCH_ENTRIES = 2_000_000
#: Longest message an ``error:`` or ``warning:`` line prints (characters); the rest is
#: cut and counted.
MAX_MESSAGE_CHARS = 1000

# -- the agent's output -------------------------------------------------------------------
#: Longest output line handled as one line; longer ones are split.
MAX_LINE_BYTES = 1 * MiB
#: The log kept in the run record: its first this many bytes...
LOG_HEAD_BYTES = 5 * MiB
#: ... and its last this many bytes; what lies between is replaced by a marker line.
LOG_TAIL_BYTES = 5 * MiB
#: Most recent events kept for the closing summary of ``execute -f`` and ``log -f``.
MAX_SUMMARY_EVENTS = 1000

# -- egress reports ----------------------------------------------------------------------
#: Largest part of the resolver's log (``dns.log``) read; the rest is not counted.
MAX_DNS_LOG_BYTES = 64 * MiB
#: Longest name kept (a DNS name has at most 253 characters).
MAX_DNS_NAME_CHARS = 253
#: Most names kept in each egress list of the record (allowed, blocked, refused
#: addresses); the rest are counted under ``"more"``.
MAX_EGRESS_NAMES = 200
#: Largest ``refused.json`` / ``status.json`` read.
MAX_REPORT_BYTES = 1 * MiB

# -- the repository's .iterare/ files ------------------------------------------------------
#: Largest prompt file read (the repository writes them).
MAX_PROMPT_BYTES = 1 * MiB
#: Largest frontmatter of a prompt file parsed (YAML is read by a pure-Python parser).
MAX_FRONTMATTER_BYTES = 64 * 1024
#: Most YAML values (scalars, lists, mappings) in a prompt's frontmatter.
MAX_YAML_NODES = 1000
#: Deepest nesting of YAML lists and mappings in a prompt's frontmatter.
MAX_YAML_DEPTH = 20
#: Largest ``.iterare/config.toml``, ``.iterare/Dockerfile`` or ``.iterare/include`` read.
MAX_PROJECT_FILE_BYTES = 1 * MiB
#: Most lines (paths or globs) in ``.iterare/include``.
MAX_INCLUDE_PATTERNS = 50
#: Most rounds ``execute --until`` takes (``--max-rounds``).
MAX_ROUNDS = 50
#: Most attempts ``execute -n`` starts.
MAX_ATTEMPTS = 64
#: Of a loop's check output, the end kept in the record and given to the next round.
MAX_CHECK_TAIL_BYTES = 16 * 1024

#: Every limit above, name -> value (documented in git-iterare-execute(1), LIMITS).
ALL = {name: value for name, value in dict(globals()).items()
       if name.startswith("MAX_") or name.startswith("LOG_") or name == "IMPORT_BATCH_BYTES"}


def human(value: int) -> str:
    """``value`` as the man page writes it: ``100 MiB`` for whole MiB, else digits."""
    if value >= MiB and value % MiB == 0:
        return f"{value // MiB} MiB"
    return str(value)
