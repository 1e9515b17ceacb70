"""The SavedModel export's TensorFlow Serving REST contract (docs/serving.md), with the model
loaded in-process: the documented requests, decoded as TensorFlow Serving decodes JSON, call the
named signature, and the outputs, encoded as it encodes them, have the documented form. The
documented Python client runs against a small HTTP server that answers the same way."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asrkit.testing import http_server
from tests.conftest import ROOT
from tests.test_transcribe import LDC, make_tiny_run

DOC = ROOT / "docs" / "serving.md"


def documented(kind: str) -> dict[str, str]:
    """``{name: code}`` of the blocks marked ``<!-- serving-KIND: name -->``."""
    text = DOC.read_text()
    return dict(re.findall(rf"<!-- serving-{kind}: (\w+) -->\n```\w+\n(.*?)```", text, re.S))


# -- TensorFlow Serving's JSON encoding, as its REST API documents it ---------------------------


def decode_value(value: Any, dtype: Any) -> np.ndarray:
    """A JSON value as a tensor of ``dtype``: nested lists are the tensor, ``{"b64": ...}``
    is bytes (for string inputs)."""
    def unwrap(item: Any) -> Any:
        if isinstance(item, dict):
            assert set(item) == {"b64"}, item
            return base64.b64decode(item["b64"])
        if isinstance(item, list):
            return [unwrap(i) for i in item]
        return item

    if dtype.name == "string":
        return np.array(unwrap(value), dtype=object)
    array = np.array(value)
    assert array.dtype.kind in "iuf", f"not numbers: {array.dtype}"
    if dtype.is_integer:  # TensorFlow Serving refuses a fraction or a value out of range
        assert array.dtype.kind in "iu", "an integer input given fractions"
        info = np.iinfo(dtype.as_numpy_dtype)
        assert array.min(initial=0) >= info.min and array.max(initial=0) <= info.max
    return array.astype(dtype.as_numpy_dtype)


def encode_value(name: str, value: np.ndarray) -> Any:
    """A tensor as TensorFlow Serving writes it: lists; strings as UTF-8 text, or ``{"b64"}``
    when the output's name ends in ``_bytes``."""
    if value.dtype.kind in "OS":  # a string tensor: an object array, or bytes for a scalar
        def text(item: Any) -> Any:
            if isinstance(item, list):
                return [text(i) for i in item]
            if name.endswith("_bytes"):
                return {"b64": base64.b64encode(item).decode()}
            return item.decode("utf-8")
        return text(value.tolist())
    return value.tolist()


def predict(loaded: Any, body: str) -> str:
    """``POST /v1/models/NAME:predict`` for the columnar ("inputs") format."""
    import tensorflow as tf

    request = json.loads(body)
    assert set(request) <= {"signature_name", "inputs"}, set(request)
    signature = loaded.signatures[request.get("signature_name", "serving_default")]
    specs = signature.structured_input_signature[1]
    inputs = request["inputs"]
    if not isinstance(inputs, dict):  # one input may be given without its name
        assert len(specs) == 1
        inputs = {next(iter(specs)): inputs}
    assert set(inputs) == set(specs), (set(inputs), set(specs))
    tensors = {name: tf.constant(decode_value(value, specs[name].dtype))
               for name, value in inputs.items()}
    for name, tensor in tensors.items():
        assert specs[name].shape.is_compatible_with(tensor.shape), (name, tensor.shape)
    outputs = {name: value.numpy() for name, value in signature(**tensors).items()}
    encoded = {name: encode_value(name, np.asarray(value)) for name, value in outputs.items()}
    if len(encoded) == 1:
        return json.dumps({"outputs": next(iter(encoded.values()))})
    return json.dumps({"outputs": encoded})


def conforms(value: Any, documented: Any) -> bool:
    """Whether ``value`` has the JSON form of ``documented``: the same keys, lists where it has
    lists (of any length, each item of the documented items' form), the same scalar types."""
    if isinstance(documented, dict):
        return (isinstance(value, dict) and set(value) == set(documented)
                and all(conforms(value[k], documented[k]) for k in documented))
    if isinstance(documented, list):
        return isinstance(value, list) and all(
            any(conforms(v, d) for d in documented) for v in value)
    return type(value) is type(documented)


# -- the tests ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    from asrkit.serving.export import export_run

    base = tmp_path_factory.mktemp("serving")
    run = make_tiny_run(base / "run")
    # TensorFlow Serving's layout: MODEL_BASE_PATH/NAME/VERSION.
    return Path(export_run(run, "savedmodel", base / "models" / "asrkit" / "1")["path"])


@pytest.fixture(scope="module")
def loaded(export):
    import tensorflow as tf

    return tf.saved_model.load(str(export))


@pytest.fixture(scope="module")
def pcm():
    from asrkit.serving.transcribe import load_audio

    return load_audio(LDC / "LDC93S1.wav")


def test_the_documented_signatures_are_the_exports(loaded):
    text = DOC.read_text()
    table = re.findall(r"^\| `(\w+)`(?:, `(\w+)`)? \|", text, re.M)
    names = {n for row in table for n in row if n}
    assert names == set(loaded.signatures)
    for name, signature in loaded.signatures.items():
        specs = signature.structured_input_signature[1]
        assert list(specs) == ["pcm"] and specs["pcm"].shape.as_list() == [None], name
        assert specs["pcm"].dtype.name == ("int16" if name.endswith("int16") else "float32")
        outputs = set(signature.structured_outputs)
        assert outputs == ({"logits"} if name.startswith("logits")
                           else {"text", "characters", "labels"}), name


@pytest.mark.parametrize("name", ["transcribe", "logits"])
def test_documented_requests_give_the_documented_responses(loaded, name):
    request = documented("request")[name]
    response = json.loads(predict(loaded, request))  # the documented body, as it is
    assert conforms(response, json.loads(documented("response")[name])), response


def test_a_real_utterance_through_the_rest_contract(loaded, pcm):
    """The whole recording in both forms of input: the server's text and logits are the
    model's own."""
    import tensorflow as tf

    direct = loaded.signatures["transcribe_int16"](pcm=tf.constant(pcm))
    text = direct["text"].numpy().decode()
    assert len(text.split()) > 2
    body = json.dumps({"signature_name": "transcribe_int16", "inputs": {"pcm": pcm.tolist()}})
    outputs = json.loads(predict(loaded, body))["outputs"]
    assert outputs["text"] == text
    assert "".join(outputs["characters"]) == text
    assert outputs["labels"] == direct["labels"].numpy().tolist()

    floats = (pcm.astype(np.float32) / 32768).tolist()
    logits = json.loads(predict(loaded, json.dumps(
        {"signature_name": "logits", "inputs": {"pcm": floats}})))["outputs"]
    expected = loaded.signatures["logits_int16"](pcm=tf.constant(pcm))["logits"].numpy()
    assert np.array(logits).shape == expected.shape
    assert np.max(np.abs(np.array(logits) - expected)) < 1e-5
    # serving_default is transcribe, and takes the single input without its name too.
    default = json.loads(predict(loaded, json.dumps({"inputs": floats})))["outputs"]
    assert default["text"] == text


def test_requests_tensorflow_serving_would_refuse_are_refused(loaded):
    with pytest.raises(AssertionError):  # int16 given fractions
        predict(loaded, json.dumps({"signature_name": "transcribe_int16",
                                    "inputs": {"pcm": [0.5, 0.25]}}))
    with pytest.raises(AssertionError):  # the row format: a batch of one, not [samples]
        predict(loaded, json.dumps({"signature_name": "transcribe_int16",
                                    "instances": [[0, 1, 2]]}))


def test_the_documented_client_runs_against_the_contract(loaded, pcm, tmp_path):
    import soundfile

    pytest.importorskip("requests")

    class Server(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            assert self.path == "/v1/models/asrkit:predict", self.path
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            answer = predict(loaded, body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    with http_server(Server) as url:
        code = re.search(r"<!-- serving-client -->\n```python\n(.*?)```", DOC.read_text(),
                         re.S).group(1)
        code = code.replace("http://localhost:8501", url)
        soundfile.write(tmp_path / "talk16k.wav", pcm, 16000, subtype="PCM_16")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                cwd=tmp_path, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    import tensorflow as tf

    text = loaded.signatures["transcribe_int16"](pcm=tf.constant(pcm))["text"].numpy().decode()
    assert result.stdout == text + "\n"
