#!/usr/bin/env bash
# Set up asrkit on a fresh machine: the sox program (system package) and a virtual environment
# in .venv with asrkit, its bundled first-party plugins and the test tools. Safe to rerun.
# The KenLM decoder plugin compiles kenlm (about 100 s the first time; needs g++).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
why=()  # what each is for: said in the one line before apt-get runs
need() { why+=("$1"); need_apt+=("${@:2}"); }  # need REASON PACKAGE...
command -v sox >/dev/null || need "sox: asrkit reads and converts audio" sox libsox-fmt-all
# The tests' synthesised speech, and the open-vocabulary benchmark corpus (benchmarks/open_vocab.py):
# a second synthesiser and real English text.
command -v espeak-ng >/dev/null || need "espeak-ng: speech for the tests and benchmarks" espeak-ng
command -v flite >/dev/null || need "flite: the benchmark's second voice" flite
[ -d /usr/share/festival/voices/english/ked_diphone ] ||
  need "festival: the benchmark's second training engine" festival festvox-kdlpc16k
[ -f /usr/share/games/fortunes/fortunes ] || need "fortunes: the benchmark's English text" fortunes
# The benchmark LM's word list (bench_learning.py --lm): a spelling dictionary.
[ -f /usr/share/dict/american-english ] || need "wamerican: the benchmark LM's word list" wamerican
if ((${#need_apt[@]})); then
  if [ "$(id -u)" = 0 ]; then sudo=(); else sudo=(sudo); fi
  reasons=$(IFS=';'; echo "${why[*]}")
  echo "setup: apt-get install ${need_apt[*]} (${reasons//;/; })"
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
