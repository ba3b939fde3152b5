"""Writes the .NET binding's NuGet package in NuGet's documented layout (a zip: the .nuspec at its
root, the managed assembly under lib/<framework>/, the native library under
runtimes/linux-x64/native/, and the Open Packaging Conventions parts NuGet clients expect), so
that no .NET SDK is needed to make it.

    python3 tools/install/nupkg.py --version 0.1.0 --abi 6 --assembly build/dotnet/TensorRef.dll \
        --native target/release/libtensorref.so --out build/nuget      (make nuget)

The assembly is Mono's mcs build, against the .NET Framework 4.5 profile (lib/net45): it runs on
Mono and .NET Framework, and on .NET 6+ through its compatibility with .NET Framework libraries.
"""
from __future__ import annotations

import argparse
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

ID = "TensorRef"
FRAMEWORK = "net45"

DESCRIPTION = (
    "Reference-counted libtorch tensor handles with TorchSharp's dispose scopes, and a residency "
    "manager that keeps every tensor's device copy under one byte budget, over libtensorref's C "
    "ABI (version {abi}). The package carries libtensorref.so for linux-x64 "
    "(runtimes/linux-x64/native) but not libtorch: it needs libtorch 2.11, the PyTorch 2.11 "
    "wheel's torch/lib. libtensorref.so finds the libtorch it was built against by its RUNPATH; "
    "elsewhere put torch/lib on LD_LIBRARY_PATH (python3 -c 'import torch, os; "
    "print(os.path.dirname(torch.__file__) + \"/lib\")'). TorchSharp's own libtorch cannot serve: "
    "it is another build.")

NUSPEC = """<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://schemas.microsoft.com/packaging/2012/06/nuspec.xsd">
  <metadata>
    <id>{id}</id>
    <version>{version}</version>
    <title>TensorRef</title>
    <authors>The libtensorref authors</authors>
    <owners>The libtensorref authors</owners>
    <licenseUrl>https://spdx.org/licenses/MIT.html</licenseUrl>
    <projectUrl>https://github.com/libtensorref/libtensorref</projectUrl>
    <requireLicenseAcceptance>false</requireLicenseAcceptance>
    <description>{description}</description>
    <summary>libtorch tensor lifetimes and device residency for .NET (MIT OR Apache-2.0).</summary>
    <tags>pytorch libtorch tensor gpu memory dispose native</tags>
  </metadata>
</package>
"""

CONTENT_TYPES = """<?xml version="1.0" encoding="utf-8"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">
  <Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml" />
  <Default Extension="nuspec" ContentType="application/octet" />
  <Default Extension="dll" ContentType="application/octet" />
  <Default Extension="so" ContentType="application/octet" />
  <Default Extension="txt" ContentType="application/octet" />
</Types>
"""

RELS = """<?xml version="1.0" encoding="utf-8"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">
  <Relationship Type="http://schemas.microsoft.com/packaging/2010/07/manifest" Target="/{id}.nuspec" Id="R1" />
</Relationships>
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", required=True)
    ap.add_argument("--abi", required=True)
    ap.add_argument("--assembly", type=Path, required=True)
    ap.add_argument("--native", type=Path, required=True)
    ap.add_argument("--license", type=Path, default=Path("LICENSE-MIT"))
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"{ID}.{a.version}.nupkg"
    nuspec = NUSPEC.format(id=ID, version=escape(a.version), description=escape(DESCRIPTION.format(abi=a.abi)))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", CONTENT_TYPES)
        z.writestr("_rels/.rels", RELS.format(id=ID))
        z.writestr(f"{ID}.nuspec", nuspec)
        z.write(a.assembly, f"lib/{FRAMEWORK}/{a.assembly.name}")
        z.write(a.native, "runtimes/linux-x64/native/libtensorref.so")
        z.write(a.license, "LICENSE.txt")
    print(path)


if __name__ == "__main__":
    main()
