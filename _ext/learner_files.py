"""The learner-file rules: a learner's work in a generated notebook is never overwritten.

* **What counts as an edit** (:func:`fingerprint`, :func:`learner_changed`): the SHA-256 of the
  cells' types and sources, in order, is recorded in the notebook's metadata
  (``attnlib_course.fingerprint``) when it is written.  A notebook whose cells no longer give
  that hash was edited (a cell added, deleted, moved or changed).  Outputs, execution counts
  and metadata (cell or notebook: collapsed or expanded cells, timings, saved widget state)
  are left out: a notebook that was only run, or opened and saved, is not edited, and is
  replaced by the new version (running it again brings its outputs back).  A notebook without
  a recorded fingerprint (an older course version's, or the learner's own) counts as edited
  unless its cells equal those of the notebook about to be written; one that cannot be read
  counts as edited.
* **Where the new version goes** (:func:`save_learner_notebook`, :func:`new_version_path`): an
  edited notebook is kept untouched, and the new version goes beside it to
  ``<name>.new.ipynb``, or, when the learner edited that one too, to the first dated
  ``<name>.new-<UTC time>.ipynb`` that is not edited (a new dated file only when every one is),
  so that regenerating again rewrites the same copy instead of adding one.
* **The message**: one line naming every file that keeps the learner's work (the notebook and
  the edited ``.new`` copies beside it) and the file the new version went to.
* **Clean** (:func:`clean`, ``make clean``): deletes the notebooks that are not edited (they come
  back with ``make notebooks``), keeps and names the edited ones, and leaves every other file.

Only the standard library is imported at module level (nbformat inside :func:`write_notebook`),
so ``make_notebooks.py --clean`` runs without the course's packages.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path


def fingerprint(cells) -> str:
    """SHA-256 of what a learner can change in a notebook: the cells' types and sources, in
    order (added, deleted, moved or edited cells all change it).  Outputs, execution counts and
    metadata are left out: running cells changes them (JupyterLab also records run timings and
    opened cells in the metadata), and running them again brings them back.  Reads plain JSON
    dicts, so ``--clean`` needs only the standard library."""
    digest = hashlib.sha256()
    for cell in cells:
        source = cell.get("source", "")
        digest.update(json.dumps([cell.get("cell_type"), "".join(source) if isinstance(source, list) else source],
                                 ensure_ascii=False).encode("utf-8"))
    return digest.hexdigest()


def learner_changed(path: Path, fresh=None) -> bool:
    """Whether the notebook at ``path`` holds work that regenerating would lose: its cells'
    fingerprint differs from the one recorded when this tool wrote it.  A notebook with no
    recorded fingerprint (an older course version's, or one the learner made) counts as
    changed unless its cells equal those of ``fresh`` (the notebook about to be written)."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True                      # unreadable: not ours to replace
    cells = nb.get("cells", [])
    recorded = nb.get("metadata", {}).get("attnlib_course", {}).get("fingerprint")
    if recorded:
        return fingerprint(cells) != recorded
    return fresh is None or fingerprint(cells) != fingerprint(fresh.cells)


def new_versions(path: Path) -> list:
    """The new versions written beside ``path`` so far: ``05_masking.new.ipynb`` and the dated
    ``05_masking.new-<UTC time>.ipynb``, oldest first."""
    stem = path.name.removesuffix(".ipynb")
    first = path.with_name(f"{stem}.new.ipynb")
    return ([first] if first.exists() else []) + sorted(path.parent.glob(f"{stem}.new-*.ipynb"))


def new_version_path(path: Path) -> Path:
    """Where the new version of a notebook the learner changed goes: the first new version
    beside it (``05_masking.new.ipynb``, then the dated ``05_masking.new-<UTC time>.ipynb``)
    that the learner has not changed, so that running ``make notebooks`` again rewrites it
    instead of adding a copy; a new dated file only when the learner changed every one."""
    import time
    stem = path.name.removesuffix(".ipynb")
    for candidate in [path.with_name(f"{stem}.new.ipynb"), *sorted(path.parent.glob(f"{stem}.new-*.ipynb"))]:
        if not candidate.exists() or not learner_changed(candidate):
            return candidate
    return path.with_name(f"{stem}.new-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}.ipynb")


def save_learner_notebook(nb, path: Path, sign: bool = True, log=None) -> Path:
    """Write ``nb`` to ``path`` unless the learner changed the notebook there since this tool
    wrote it: then that file is kept untouched, ``nb`` goes to :func:`new_version_path`, and
    a line says so.  Returns the path written."""
    log = log or print
    nb.metadata.setdefault("attnlib_course", {})["fingerprint"] = fingerprint(nb.cells)
    target = path
    if path.exists() and learner_changed(path, nb):
        target = new_version_path(path)
        yours = [p.name for p in new_versions(path) if p != target and learner_changed(p)]
        log(f"kept {path}" + (f" and {', '.join(yours)} beside it" if yours else "")
            + f": {'they have' if yours else 'it has'} changes of yours since `make notebooks` wrote "
            + f"{'them' if yours else 'it'}; the new version is {target.name} beside it (copy your work across, "
            f"then delete the old files and rename the new one)")
    write_notebook(nb, target, sign=sign)
    return target


def clean(out: Path, log=None) -> int:
    """``make clean`` for the notebooks folder: delete the notebooks this tool wrote that
    nobody changed since (they come back with ``make notebooks``); keep, and name, every
    notebook with changes, and leave every other file (your own notebooks, JupyterLab's
    ``.ipynb_checkpoints``).  Returns the number of notebooks kept."""
    log = log or print
    if not out.is_dir():
        return 0
    kept = []
    for path in sorted(out.glob("*.ipynb")):
        if learner_changed(path):
            kept.append(path.name)
        else:
            path.unlink()
    if kept:
        log(f"kept your changed notebooks in {out}: {', '.join(kept)}")
    try:
        out.rmdir()                      # only if nothing is left in it
    except OSError:
        pass
    return len(kept)



def write_notebook(nb, path: Path, sign: bool = True) -> None:
    import nbformat
    path.parent.mkdir(parents=True, exist_ok=True)
    if sign:
        try:
            from nbformat.sign import NotebookNotary
            NotebookNotary().sign(nb)
        except Exception as err:  # noqa: BLE001 - signing is a convenience (trusted outputs)
            print(f"(not signed: {err})", file=sys.stderr)
    nbformat.write(nb, str(path))

