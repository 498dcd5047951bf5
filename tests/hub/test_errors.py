"""A Hub that refuses: the error is one line that never shows the token in use or the credentials of the
endpoint's URL (huggingface_hub echoes the request's URL, userinfo included, in its errors). The Hub is a
local HTTP server on 127.0.0.1 that answers every request with the status under test."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import json_api
from tests.hub.test_publish import PLANTED
from trm import eval as trm_eval
from trm.errors import TRMError
from trm.hub.publish import upload
from trm.secrets import redact

# The password in the endpoint's URL: token-shaped, and built at run time like PLANTED (the repository's secret scan).
IN_URL = "hf_" + "".join(chr(ord("A") + (3 * i) % 26) for i in range(34))


@pytest.fixture(params=[401, 404])
def refusing_hub(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[None]:
    from huggingface_hub import constants

    refusal = (request.param, {"error": "Invalid credentials in Authorization header"})
    with json_api({"*": refusal}) as hub:
        endpoint = f"http://mirror-user:{IN_URL}@127.0.0.1:{hub.port}"
        monkeypatch.setenv("HF_TOKEN", PLANTED)
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        yield


def test_a_refused_download_or_upload_names_the_url_without_its_credentials(
    refusing_hub: None, tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert trm_eval.main(["hf://me/private-model", "--output-dir", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "hf://me/private-model" in err
    assert "http://***@127.0.0.1:" in err  # where it went is still said
    (tmp_path / "staged").mkdir()
    with pytest.raises(TRMError, match="the Hub refused the upload") as refused:
        upload(tmp_path / "staged", "me/private-model", private=True, message="m")
    assert "http://***@127.0.0.1:" in str(refused.value)
    assert "HTTP Request" in caplog.text and "***@127.0.0.1:" in caplog.text  # the client's own log lines
    shown = err + str(refused.value) + capsys.readouterr().err + caplog.text
    assert IN_URL not in shown and PLANTED not in shown and "mirror-user" not in shown
    assert not (tmp_path / "e").exists()


def test_redact_hides_url_credentials_token_parameters_tokens_and_given_values() -> None:
    text = (
        f"for url 'https://u:{IN_URL}@hub.example/api?access_token=abc123456789&x=1' "
        f"Bearer {'b' * 30} with {PLANTED} and s3cret-value-in-use"
    )
    shown = redact(text, ("s3cret-value-in-use", None, "short"))
    assert shown == ("for url 'https://***@hub.example/api?access_token=***&x=1' Bearer *** with *** and ***")
    assert redact("404 Not Found for url 'https://huggingface.co/api/models/a/b'") == (
        "404 Not Found for url 'https://huggingface.co/api/models/a/b'"
    )
