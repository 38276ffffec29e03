#!/bin/sh
# Fetches what the llama.cpp API tests need, once, into a cache outside the repository, and
# prints the cache folder:
#   <cache>/llama_cpp_python-0.3.36/   the sdist of llama-cpp-python 0.3.36, unpacked (its
#                                      Python package and llama.cpp's include/llama.h)
#   <cache>/pydeps/                    numpy, typing-extensions, jinja2, markupsafe, diskcache
#                                      (what `import llama_cpp` needs), pinned, --no-deps
# The cache is $PACKLM_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/packlm.
set -eu
cache=${PACKLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/packlm}
version=0.3.36
sdist=llama_cpp_python-$version.tar.gz
# The sha256 the package index publishes for that file.
sdist_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
src=$cache/llama_cpp_python-$version
mkdir -p "$cache"
if [ ! -f "$src/llama_cpp/llama_cpp.py" ]; then
  dl=$cache/download
  mkdir -p "$dl"
  if [ ! -f "$dl/$sdist" ]; then
    echo "fetching the llama-cpp-python $version sdist (pip download)" >&2
    # pip prepares an sdist's metadata before it saves it, in an environment with the sdist's
    # build requirements (scikit-build-core, and ninja where the system has none). Only this
    # package is asked for as source: those come as wheels. (--no-binary :all: built every one
    # of them from source first, ninja's C++ among them: 100 s of CPU, where this takes 10.)
    python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$dl" >&2
  fi
  echo "$sdist_sha256  $dl/$sdist" | sha256sum -c --quiet - >&2 ||
    { rm -f "$dl/$sdist"; echo "fetch.sh: $dl/$sdist is not the published sdist (sha256); removed" >&2; exit 1; }
  tar xzf "$dl/$sdist" -C "$cache"
fi
if [ ! -f "$cache/pydeps/.done" ]; then
  python3 -m pip install --quiet --no-deps --target "$cache/pydeps" \
    numpy==2.4.6 typing_extensions==4.16.0 jinja2==3.1.6 markupsafe==3.0.4 diskcache==5.6.3 >&2
  touch "$cache/pydeps/.done"
fi
echo "$cache"
