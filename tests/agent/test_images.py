"""Images on the wire: the scripted vLLM stand-in (real HTTP) checks every image part as vLLM does,
and the tests assert the exact request shape for each placement, for a text-only model, after a
resume, and for a chat attachment."""

from __future__ import annotations

import base64

from abhed.agent.loop import Agent, Budget, Limits
from abhed.cli.attachments import attach
from abhed.model.replay import ReplayServer, Turn
from agent_helpers import make_agent, tool_messages
from media_testing import decoded, image, scanned_pdf


def _read_then_answer(path) -> list[Turn]:
    return [Turn(calls=[("read", {"path": str(path)})]), Turn(text="A red square with stripes.")]


def _png_url(url: str) -> bool:
    return url.startswith("data:image/png;base64,") and bool(base64.b64decode(url.split(",", 1)[1], validate=True))


def test_a_read_image_travels_in_the_tool_message_as_vllm_takes_it(ws, home):
    (ws / "shot.png").write_bytes(image("PNG", 2000, 1500))
    with ReplayServer(_read_then_answer(ws / "shot.png"), images=8) as server:
        agent = make_agent(ws, home, server, profile="qwen3-vl")  # placement "tool"
        assert agent.run("What is in shot.png?").answer == "A red square with stripes."
    [tool] = tool_messages(server.requests[1])
    text, picture = tool["content"]
    assert text == {"type": "text", "text": text["text"]}
    assert text["text"].startswith(f"[image: {ws / 'shot.png'}, PNG 2000x1500, sent as ")
    assert list(picture) == ["type", "image_url"] and picture["type"] == "image_url"
    assert list(picture["image_url"]) == ["url"] and _png_url(picture["image_url"]["url"])
    sent = decoded(picture["image_url"]["url"])
    assert sent.width * sent.height <= 1048576 and sent.width > sent.height
    assert server.refused == []


def test_where_tool_messages_take_no_images_they_follow_in_a_user_message(ws, home):
    (ws / "shot.png").write_bytes(image("PNG", 300, 200))
    with ReplayServer(_read_then_answer(ws / "shot.png"), images=4, tool_images=False) as server:
        agent = make_agent(ws, home, server, profile="qwen2.5-vl")  # placement "user"
        assert agent.run("What is in shot.png?").answer == "A red square with stripes."
    messages = server.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    label = f"[image: {ws / 'shot.png'}, PNG 300x200, sent at full size as PNG ("
    assert messages[3]["content"].startswith(label)
    assert messages[3]["content"].endswith("\n[the image is in the user message after the tool results]")
    intro, picture = messages[4]["content"]
    assert intro == {"type": "text", "text": f"From the read result above: {messages[3]['content'].split(chr(10))[0]}"}
    assert picture["type"] == "image_url" and decoded(picture["image_url"]["url"]).size == (300, 200)
    assert server.refused == []


def test_the_server_would_refuse_an_image_in_a_tool_message_where_the_profile_says_so(ws, home):
    """The stand-in's check is real: the same read with placement "tool" is refused."""
    (ws / "shot.png").write_bytes(image("PNG", 300, 200))
    with ReplayServer(_read_then_answer(ws / "shot.png"), images=4, tool_images=False) as server:
        agent = make_agent(ws, home, server, profile="qwen3-vl")
        outcome = agent.run("What is in shot.png?")
    assert outcome.status == "failed"
    assert "refused the images in the request" in outcome.detail and 'model.image_placement = "user"' in outcome.detail


def test_a_text_only_model_gets_the_refusal_and_no_image_is_sent(ws, home):
    (ws / "shot.png").write_bytes(image("PNG", 300, 200))
    with ReplayServer(_read_then_answer(ws / "shot.png"), images=0) as server:
        agent = make_agent(ws, home, server, profile="qwen2.5-coder")
        assert agent.run("What is in shot.png?").status == "done"
    [tool] = tool_messages(server.requests[1])
    assert isinstance(tool["content"], str) and "takes text only, so Abhed cannot show the image" in tool["content"]
    assert "image_url" not in str(server.requests[1]) and server.refused == []


def test_only_the_newest_images_a_request_can_carry_are_sent(ws, home):
    for n in range(3):
        (ws / f"s{n}.png").write_bytes(image("PNG", 40 + n, 30))
    turns = [Turn(calls=[("read", {"path": str(ws / f"s{n}.png")})]) for n in range(3)] + [Turn(text="Seen.")]
    with ReplayServer(turns, images=2) as server:
        agent = make_agent(ws, home, server, profile="qwen3-vl")
        agent.model.vision = agent.model.vision.model_copy(update={"max_images": 2})
        agent._use_format(agent.model.tool_format)
        assert agent.run("Look at all three.").answer == "Seen."
    last = tool_messages(server.requests[3])
    assert isinstance(last[0]["content"], str)
    assert "[image no longer sent: [image: " in last[0]["content"] and "read the file again to see it" in last[0]["content"]
    assert [decoded(m["content"][1]["image_url"]["url"]).width for m in last[1:]] == [41, 42]
    assert server.refused == []


def test_a_scanned_pdf_page_goes_to_the_model_as_its_image(ws, home):
    (ws / "scan.pdf").write_bytes(scanned_pdf(800, 1100))
    with ReplayServer(_read_then_answer(ws / "scan.pdf"), images=8) as server:
        agent = make_agent(ws, home, server, profile="qwen3-vl")
        agent.run("Read scan.pdf")
    [tool] = tool_messages(server.requests[1])
    assert "--- page 1 of 1 ---" in tool["content"][0]["text"]
    assert decoded(tool["content"][1]["image_url"]["url"]).size == (800, 1100)


def test_a_resumed_session_sends_the_image_again_from_its_log(ws, home):
    (ws / "shot.png").write_bytes(image("PNG", 300, 200))
    turns = _read_then_answer(ws / "shot.png") + [Turn(text="Still a red square.")]
    with ReplayServer(turns, images=8) as server:
        first = make_agent(ws, home, server, profile="qwen3-vl")
        first.run("What is in shot.png?")
        model = first.model
        again, _ = Agent.restore(first.ctx, model, first.gate, Budget(Limits(turns=5)), display=first.display)
        assert again.run("And now?").answer == "Still a red square."
    assert tool_messages(server.requests[2]) == tool_messages(server.requests[1])


def test_a_chat_attachment_goes_with_the_prompt(ws, home, tmp_path):
    outside = tmp_path / "Screen Shot.png"
    outside.write_bytes(image("PNG", 120, 80))
    with ReplayServer([Turn(text="A button.")], images=4) as server:
        agent = make_agent(ws, home, server, profile="qwen2.5-vl")
        attached = attach(f"what is this? '{outside}'", agent.ctx.vision)
        assert attached.lines == [attached.images[0]["label"]]
        assert attached.lines[0].startswith(f"[attached image: {outside}, PNG 120x80, sent at full size")
        assert agent.run(attached.prompt, images=attached.images).answer == "A button."
    user = server.requests[0]["messages"][1]
    text, picture = user["content"]
    assert text == {"type": "text", "text": f"what is this? '{outside}'\n\n{attached.lines[0]}"}
    assert decoded(picture["image_url"]["url"]).size == (120, 80)


# -- abhed doctor and abhed chat, as the human runs them ------------------------------------------

from test_cli_agent import abhed as run_abhed  # noqa: E402


def _doctor_images(home, **server) -> str:
    with ReplayServer(lambda body: Turn(calls=[("glob", {"pattern": "*.md"})]), **server) as replay:
        proc = run_abhed("doctor", "--endpoint", replay.url, home=home)
    return next(line for line in proc.stdout.splitlines() if line[6:19].strip() == "images")


def test_doctor_confirms_a_vision_model_and_where_its_images_go(home):
    line = _doctor_images(home, model_id="Qwen/Qwen3-VL-30B-A3B-Instruct", images=8)
    assert line == ("OK    images        the server took 8 image(s) in one request; a tool result's images go in tool "
                    "messages; each downscaled to 1,048,576 pixels")


def test_doctor_names_the_setting_when_the_server_takes_fewer_images(home):
    line = _doctor_images(home, model_id="Qwen/Qwen3-VL-30B-A3B-Instruct", images=2)
    assert line.startswith("FAIL  images        the profile says the model takes 8 image(s) a request, but the server "
                           "refused 8 (At most 2 image(s) may be provided in one prompt.")
    assert line.endswith("""Serve it with --limit-mm-per-prompt '{"image": 8}', or set model.max_images = 2.""")


def test_doctor_names_the_setting_when_tool_messages_take_no_images(home):
    line = _doctor_images(home, model_id="Qwen/Qwen3-VL-30B-A3B-Instruct", images=8, tool_images=False)
    assert line.startswith("FAIL  images        the server refuses images in a tool message (")
    assert line.endswith('where this profile sends them: set model.image_placement = "user".')


def test_doctor_warns_when_a_text_only_profile_s_server_takes_images(home):
    line = _doctor_images(home, model_id="Qwen/Qwen2.5-Coder-7B-Instruct", images=4)
    assert line.startswith("WARN  images        the profile says text only, but the server took a 16x16 PNG")
    assert 'set model.images = "on"' in line


def test_doctor_fails_when_a_vision_profile_s_server_takes_no_images(home):
    line = _doctor_images(home, model_id="google/gemma-3-27b-it", images=0)
    assert "FAIL  images        the profile says the model takes 4 image(s) a request" in line
    assert "At most 0 image(s) may be provided in one prompt." in line
    assert 'set model.images = "off" if the model takes text only' in line


def test_the_operator_turns_images_off_for_a_vision_profile(ws, home, tmp_path):
    (ws / "shot.png").write_bytes(image("PNG", 60, 40))
    with ReplayServer(_read_then_answer(ws / "shot.png"), images=0, model_id="google/gemma-3-27b-it") as server:
        proc = run_abhed("run", "look at shot.png", "--endpoint", server.url, "--workspace", str(ws), home=home,
                         env={"ABHED_IMAGES": "off"})
    assert proc.returncode == 0, proc.stderr
    assert "text only" in proc.stderr and server.refused == []
    assert "takes text only, so Abhed cannot show the image" in tool_messages(server.requests[1])[0]["content"]


def test_chat_shows_an_attachment_line_and_sends_the_image(ws, home, tmp_path):
    dropped = tmp_path / "Bug Report.png"
    dropped.write_bytes(image("PNG", 90, 60))
    with ReplayServer([Turn(text="A dialog box.")], images=4, model_id="Qwen/Qwen2.5-VL-7B-Instruct") as server:
        proc = run_abhed("chat", "--endpoint", server.url, "--workspace", str(ws), home=home,
                         input=f"what is in {str(dropped).replace(' ', chr(92) + ' ')} ?\n")
    assert proc.returncode == 0, proc.stderr
    assert f"[attached image: {dropped}, PNG 90x60, sent at full size as PNG" in proc.stdout
    user = server.requests[0]["messages"][1]
    assert user["content"][1]["type"] == "image_url" and decoded(user["content"][1]["image_url"]["url"]).size == (90, 60)
