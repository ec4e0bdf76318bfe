"""The wheel's build hook: the decision core and the driver compiled with mypyc, or pure Python.

With a C compiler that finds ``Python.h``, the wheel holds the modules of :data:`COMPILED`
compiled by mypyc beside their sources, and is tagged for this interpreter and platform. Without
one, or with ``BOUNDEDGATE_NO_EXTENSIONS=1`` set at build time, or if the compilation fails, it is
the pure-Python ``py3-none-any`` wheel, with a warning; mypy (mypyc) and setuptools are build
requirements only when compiling. At import, ``BOUNDEDGATE_NO_EXTENSIONS=1`` selects the sources
even where the compiled modules are installed (``boundedgate/_pure.py``).

``python hatch_build.py DIR`` compiles into ``DIR`` a copy of ``src/boundedgate``, with the same
steps as the wheel, without building one (``make compiled`` builds the wheel and installs it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from pathlib import Path
from typing import Any

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # `python hatch_build.py DIR`, outside a build
    BuildHookInterface = object  # type: ignore[assignment,misc]

#: The modules compiled, under ``src/boundedgate``: the admission path and nothing else (the
#: settings checks each admission makes, the ticket, the queue and the state, the gate and its permits,
#: the combined permit, the keyed gate's key state and per-call part). The rest stays interpreted:
#: the public ``BoundedGate`` (``_driver/_bounded.py``: mypyc 2.4 gives a native class's weak
#: references no clearing at deallocation, so the gate's weak-reference slot is an interpreted
#: subclass's), the keyed gate but its per-call base (the weak references again its subclass's), the
#: streams, the errors, the simulator, the Redis gate; ``_core/_native.py`` must.
COMPILED = (
    "_core/_settings.py",
    "_core/_ticket.py",
    "_core/_queue.py",
    "_core/_state.py",
    "_driver/_gate.py",
    "_driver/_combined_permit.py",
    "_driver/_keys.py",
    "_driver/_hooks.py",
)

#: What compiling needs beyond hatchling (the workarounds in these modules were found with mypy 2.4).
REQUIRES = ("mypy>=2.4,<3", "setuptools>=65")

#: The lines of ``_core/_native.py`` that the compiled build reads as ``object`` (see there).
_TYPED = (
    "BoolArg: TypeAlias = bool\n",
    "FloatArg: TypeAlias = float\n",
    "IntArg: TypeAlias = int\n",
    "StrArg: TypeAlias = str\n",
)

ROOT = Path(__file__).parent
PACKAGE = ROOT / "src" / "boundedgate"


def disabled() -> bool:
    """True when ``BOUNDEDGATE_NO_EXTENSIONS`` asks for the pure build."""
    return os.environ.get("BOUNDEDGATE_NO_EXTENSIONS", "") not in ("", "0")


def compiler_works() -> str | None:
    """None if the C compiler builds an extension against this Python's headers, else why not."""
    compiler = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    include = sysconfig.get_paths()["include"]
    with tempfile.TemporaryDirectory() as scratch:
        probe = Path(scratch, "probe.c")
        probe.write_text("#include <Python.h>\nint probe(void) { return Py_IsInitialized(); }\n")
        try:
            done = subprocess.run(
                [*compiler.split(), f"-I{include}", "-c", str(probe), "-o", str(Path(scratch, "probe.o"))],
                capture_output=True,
                text=True,
                check=False,
            )
        except OSError as error:
            return f"no C compiler ({compiler}: {error})"
    if done.returncode:
        return f"{compiler} cannot build against {include}/Python.h: {done.stderr.strip()[-300:]}"
    return None


def compile_into(target: Path) -> list[Path]:
    """Copy the package into ``target`` and compile :data:`COMPILED` there; return the extensions."""
    package = target / "boundedgate"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    native = package / "_core" / "_native.py"
    text = native.read_text()
    for line in _TYPED:
        if line not in text:
            raise RuntimeError(f"{native} no longer says {line.strip()!r}: update hatch_build.py")
        text = text.replace(line, line.rsplit("= ", 1)[0] + "= object\n")
    native.write_text(text)
    # A module the package uses without depending on it (an SDK's types, say) is read as Any.
    paths = [f"boundedgate/{module}" for module in COMPILED]
    script = (
        "import sys\n"
        "from setuptools import setup\n"
        "from mypyc.build import mypycify\n"
        "options = ['--ignore-missing-imports', *sys.argv[1:]]\n"
        "modules = mypycify(options, opt_level='3', group_name='boundedgate')\n"
        "setup(name='boundedgate', ext_modules=modules, script_args=['build_ext', '--inplace'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *paths], cwd=target, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise RuntimeError(f"mypyc failed:\n{(done.stdout + done.stderr)[-3000:]}")
    native.write_text(PACKAGE.joinpath("_core", "_native.py").read_text())  # the shipped one
    shutil.rmtree(target / "build", ignore_errors=True)  # setuptools' intermediate files
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    extensions = sorted(target.rglob(f"*{suffix}"))
    if len(extensions) != len(COMPILED) + 1:  # and mypyc's shared library of them
        raise RuntimeError(f"mypyc built {extensions}, expected one per module of {COMPILED} and one more")
    return extensions


class CompileHook(BuildHookInterface):  # type: ignore[misc]
    """Hatchling's custom build hook (``[tool.hatch.build.targets.wheel.hooks.custom]``)."""

    def _why_pure(self) -> str | None:
        if disabled():
            return "BOUNDEDGATE_NO_EXTENSIONS is set"
        return compiler_works()

    def dependencies(self) -> list[str]:
        """Build requirements beyond hatchling, only when compiling.

        mypy and setuptools, and the package's own dependencies, whose types mypyc reads.
        """
        return [] if self._why_pure() else [*REQUIRES, *self.metadata.core.dependencies]

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Compile into a scratch directory and add the extensions to the wheel, or stay pure."""
        if self.target_name != "wheel" or version == "editable":
            return
        why = self._why_pure()
        if why is None:
            scratch = Path(tempfile.mkdtemp(prefix="boundedgate-mypyc-"))
            self._scratch = scratch
            try:
                extensions = compile_into(scratch)
            except Exception as error:  # a pure wheel rather than no wheel
                why = str(error)
            else:
                for extension in extensions:
                    build_data["force_include"][str(extension)] = extension.relative_to(scratch).as_posix()
                build_data["pure_python"] = False
                build_data["infer_tag"] = True
                return
        warnings.warn(f"boundedgate: building the pure-Python wheel ({why})", stacklevel=1)

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """Remove the scratch directory of the compilation."""
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python hatch_build.py DIR")
    why = compiler_works()
    if why:
        sys.exit(f"cannot compile: {why}")
    for path in compile_into(Path(sys.argv[1]).resolve()):
        print(path)
