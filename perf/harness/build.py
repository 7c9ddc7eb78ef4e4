# SPDX-License-Identifier: GPL-2.0-or-later
"""Building bexd and the limit responder (release mode) in the harness's own build directory."""

import os
import subprocess


class BuildError(Exception):
    """CMake could not configure or build a target."""


def _run(command, log):
    log.write("$ " + " ".join(command) + "\n")
    log.flush()
    done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    return done.returncode == 0


def build(repo, build_dir, targets, log_path):
    """Configures `build_dir` if needed and builds each of `targets`; returns the built ones."""
    os.makedirs(build_dir, exist_ok=True)
    built = []
    with open(log_path, "a") as log:
        if not os.path.exists(os.path.join(build_dir, "build.ninja")):
            if not _run(["cmake", "-S", repo, "-B", build_dir, "-G", "Ninja",
                         "-DCMAKE_BUILD_TYPE=Release"], log):
                raise BuildError(f"cmake could not configure {build_dir}; see {log_path}")
        for target in targets:
            # One target at a time: a broken bexd must not keep the limit responder from building.
            if _run(["cmake", "--build", build_dir, "--target", target, "--", "-j2"], log):
                built.append(target)
    return built


def target_path(build_dir, target):
    for subdir in ("perf", "cli", ""):
        path = os.path.join(build_dir, subdir, target)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def build_revision(repo, revision, build_dir, log_path):
    """Builds bexd as of `revision` (any git revision of `repo`) from a detached worktree in
    BUILD_DIR/baseline-src, into BUILD_DIR/baseline; returns the binary's path."""
    source = os.path.join(build_dir, "baseline-src")
    with open(log_path, "a") as log:
        if not os.path.isdir(source):
            if not _run(["git", "-C", repo, "worktree", "add", "--detach", source, revision], log):
                raise BuildError(f"cannot check out baseline '{revision}'; see {log_path}")
        elif not _run(["git", "-C", source, "checkout", "--detach", "--quiet", revision], log):
            raise BuildError(f"cannot check out baseline '{revision}'; see {log_path}")
    binary_dir = os.path.join(build_dir, "baseline")
    if build(source, binary_dir, ["bexd"], log_path) != ["bexd"]:
        raise BuildError(f"cannot build bexd at baseline '{revision}'; see {log_path}")
    return target_path(binary_dir, "bexd")
