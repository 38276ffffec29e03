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
src=$cache/llama_cpp_python-$version
mkdir -p "$cache"
if [ ! -f "$src/llama_cpp/llama_cpp.py" ]; then
  dl=$cache/download
  mkdir -p "$dl"
  if [ ! -f "$dl/llama_cpp_python-$version.tar.gz" ]; then
    echo "fetching the llama-cpp-python $version sdist (pip download; several minutes the first time)" >&2
    python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$dl" >&2
  fi
  tar xzf "$dl/llama_cpp_python-$version.tar.gz" -C "$cache"
fi
if [ ! -f "$cache/pydeps/.done" ]; then
  python3 -m pip install --quiet --no-deps --target "$cache/pydeps" \
    numpy==2.4.6 typing_extensions==4.16.0 jinja2==3.1.6 markupsafe==3.0.4 diskcache==5.6.3 >&2
  touch "$cache/pydeps/.done"
fi
echo "$cache"
