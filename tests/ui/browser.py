#!/usr/bin/env python3
"""Headless Chromium on a local Perfetto UI, for tests/all/ui.rs (through uiload.py's helpers, from
$UI_TOOLS, default ../shared/tools/perfetto-ui). Prints one JSON object.

  browser.py url URL
      open URL (a UI address with #!/?url=...), wait until the trace is loaded: error dialog,
      slice count, top-level groups.
  browser.py native URL
      as `url`, for a UI whose trace is in a native trace processor: answers the UI's "Use trace
      processor native acceleration?" with "YES, use loaded trace" first.
  browser.py page BASE FILE
      the `serve` page at BASE: upload FILE through its file input, click "Open in Perfetto",
      and report the same for the UI tab it opens (the trace handed over by postMessage)."""
import json, os, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("UI_TOOLS", os.path.join(HERE, "../../../shared/tools/perfetto-ui")))
import uiload  # noqa: E402  (also puts selenium's venv on the path)


# The top-level groups' titles (v52 calls the workspace `workspace`, v58 `currentWorkspace`).
GROUPS = r"""
const t = window.app.trace, ws = t.currentWorkspace || t.workspace;
return (ws.children || []).map(c => c.title || c.name);"""


def report(d):
    r = uiload.wait_loaded(d, 120)
    if "error" not in r:
        r["slices"] = d.execute_async_script(uiload.QUERY, "select count(*) as n from slice")[0]["n"]
        r["groups"] = d.execute_script(GROUPS)
        r["location"] = d.current_url
    return r


def main():
    mode = sys.argv[1]
    with tempfile.TemporaryDirectory() as prof:
        d = uiload.browser(prof)
        try:
            if mode == "url":
                d.get(sys.argv[2])
                r = report(d)
            elif mode == "native":
                d.get(sys.argv[2])
                t0, clicked = time.time(), False
                while time.time() - t0 < 60 and not clicked:
                    for b in d.find_elements("css selector", ".pf-modal-dialog button"):
                        if "loaded trace" in b.text.lower():
                            b.click()
                            clicked = True
                            break
                    time.sleep(0.2)
                time.sleep(1)
                r = report(d)
                r["engine_mode"] = d.execute_script("return window.app.trace.engine.mode") if "error" not in r else None
            else:
                base, path = sys.argv[2], sys.argv[3]
                d.get(base + "/")
                d.find_element("css selector", "#file").send_keys(os.path.abspath(path))
                t0, button = time.time(), None
                while time.time() - t0 < 120 and not button:
                    found = d.find_elements("css selector", ".job.done button.open")
                    button = found[0] if found else None
                    if d.find_elements("css selector", ".job.failed"):
                        break
                    time.sleep(0.2)
                if not button:
                    r = {"error": "the page did not convert the file"}
                else:
                    first = d.current_window_handle
                    button.click()
                    t0 = time.time()
                    while len(d.window_handles) < 2 and time.time() - t0 < 30:
                        time.sleep(0.1)
                    d.switch_to.window([h for h in d.window_handles if h != first][0])
                    r = report(d)
                    d.switch_to.window(first)
                    r["handoff"] = d.execute_script(
                        "const e = document.querySelector('.job.done .handoff'); return e ? e.textContent : null")
        finally:
            d.quit()
    print(json.dumps(r))


if __name__ == "__main__":
    main()
