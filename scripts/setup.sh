#!/usr/bin/env bash
# Set up asrkit on a fresh machine: the sox program (system package) and a virtual environment
# in .venv with asrkit, its bundled first-party plugins and the test tools. Safe to rerun.
# The KenLM decoder plugin compiles kenlm (about 100 s the first time; needs g++).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v sox >/dev/null || need_apt+=(sox libsox-fmt-all)
command -v espeak-ng >/dev/null || need_apt+=(espeak-ng)
# The open-vocabulary corpus (benchmarks/open_vocab.py): a second synthesiser and real English text.
command -v flite >/dev/null || need_apt+=(flite)
[ -f /usr/share/games/fortunes/fortunes ] || need_apt+=(fortunes)
# The benchmark LM's word list (bench_learning.py --lm): a spelling dictionary.
[ -f /usr/share/dict/american-english ] || need_apt+=(wamerican)
if ((${#need_apt[@]})); then
  if [ "$(id -u)" = 0 ]; then sudo=(); else sudo=(sudo); fi
  echo "setup: installing ${need_apt[*]} (apt-get)"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip setuptools
echo "setup: installing asrkit and its plugins into .venv (first time: a few minutes)"
.venv/bin/python -m pip install --quiet --disable-pip-version-check \
  -e ".[test,lint,type,sherpa]" -e plugins/asrkit-importer-an4 -e plugins/asrkit-decoder-kenlm \
  -e plugins/asrkit-tokenizer-sentencepiece
echo "setup: done; activate with: source .venv/bin/activate"
