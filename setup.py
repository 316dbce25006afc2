"""What pyproject.toml cannot say: the course travels in the wheel as package data.

The repository keeps the lessons in notebooks/ and the exercises in exercises/ (its tests and the
notebooks' links use those folders); the wheel carries them as tracekit/_course/notebooks and
tracekit/_course/exercises, which tracekit/course.py finds. A source tree without those folders (the
autograder's own rebuild of the wheel copies only pyproject.toml, README.md and tracekit/) builds the
package alone. The wheel also carries pyproject.toml and README.md (tracekit/_course/source/): what
`tracekit autograder` needs to rebuild it from an install.

The wheel is a student's install: it leaves out `tracekit/exercises/judges/` (the instructor's side:
reference answers and the truth of every fixed case) and carries the self-check's sealed key
(`tracekit/exercises/selfcheck_key.json`) instead. Grading runs from a source checkout, where the
judges are; the Gradescope bundle's own wheel is built from the checkout's `tracekit/` without this
file, so it holds them (it is uploaded by the instructor and never reaches a student).
"""

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
COURSE = {  # package name -> (the repository's folder, the files it ships)
    "tracekit._course.notebooks": ("notebooks", "[0-9]*.ipynb"),
    "tracekit._course.exercises": ("exercises", "ex*.ipynb"),
}
course = {name: spec for name, spec in COURSE.items() if (HERE / spec[0]).is_dir()}



class build_py_and_source(build_py):
    """Also put pyproject.toml and README.md in the wheel (tracekit/_course/source/), so that
    `tracekit autograder` can rebuild this wheel for its bundle from an install."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False) or not course:
            return
        target = Path(self.build_lib) / "tracekit" / "_course" / "source"
        target.mkdir(parents=True, exist_ok=True)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(HERE / name, target / name)


setup(
    cmdclass={"build_py": build_py_and_source},
    packages=find_packages(include=["tracekit", "tracekit.*"], exclude=["tracekit.exercises.judges"]) + sorted(course),
    package_dir={name: folder for name, (folder, _) in course.items()},
    package_data={"tracekit.exercises": ["selfcheck_key.json"],
                  **{name: [pattern] for name, (_, pattern) in course.items()}},
)
