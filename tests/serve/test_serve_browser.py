"""sgeval serve in a real browser: Debian's headless chromium, driven by Selenium through its
chromedriver, against the real server (``python -m sgeval_serve``) on the demo data. A user signs
up, logs in with the token, uploads the demo's Model A through the submit page, watches it finish,
finds it on the leaderboard and sorts it; a broken prediction and a file of the wrong format get
the problems page and queue nothing; forms without their CSRF token are refused; an admin
approves the entry onto the approved board. Every page seen is saved as a PNG in
$SGEVAL_SCREENSHOTS (else a temporary folder).

chromium and chromedriver come from Debian (make setup installs them); where they are missing the
module fails, or is skipped with SGEVAL_NO_BROWSER=1."""

import json
import os
import re
import time
import urllib.parse
import zipfile

import pytest
from bench import serve_load
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SLUG = "psg-demo"
WIDTH, HEIGHT = 1400, 1000
CHROMIUM_ARGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run")
CONFIG = """\
title: sgeval browser test
state_dir: {state}
workers: 1
job_timeout: 120
signup: true
benchmarks:
  {slug}:
    title: PSG demo (synthetic)
    dataset: PSG demo
    split: test
    task: sgdet
    description: 31 synthetic test images in the shape of OpenPSG's panoptic scene graphs (tools/make_demo.py).
    gt: {data}/psg.json
    gt_seg: {data}/panoptic
    protocols: [singlempo, unique, openpsg, multimpo]
    metrics: [R@20, R@50, R@100, mR@20, mR@50, mR@100]
    order_by: mR@50
    per_predicate_metric: mR@50
    quota: {{per_day: 10, total: 50}}
    evaluation:
      k: [20, 50, 100]
"""


# the server, the browser and the screenshots ----------------------------------------------


@pytest.fixture(scope="module")
def chromium():
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        if os.environ.get("SGEVAL_NO_BROWSER") == "1":
            pytest.skip(f"SGEVAL_NO_BROWSER=1 and {', '.join(missing)} missing")
        pytest.fail(f"{', '.join(missing)} missing: the browser tests need Debian's chromium and chromium-driver "
                    "(make setup installs them; SGEVAL_NO_BROWSER=1 skips these tests)", pytrace=False)


@pytest.fixture(scope="module")
def server(chromium, demo_data, tmp_path_factory):
    """The real server on a free port with a fresh state folder; Model B queued beforehand by the
    admin's CLI (it is evaluated while the browser signs up). Yields {url, admin token, ...}."""
    folder = tmp_path_factory.mktemp("serve")
    config = folder / "serve.yaml"
    config.write_text(CONFIG.format(state=folder / "state", slug=SLUG, data=demo_data))
    admin_token = serve_load.cli(config, "token", "admin", "--admin")
    serve_load.cli(config, "submit", demo_data / "pred-b.zip", "--benchmark", SLUG, "--user", "sgeval-demo",
                   "--method", "Model B")
    with serve_load.Server(config, folder / "server.log") as running:
        yield {"url": running.url, "admin": admin_token, "log": running.log, "data": demo_data, "folder": folder}
        running.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    """The screenshots' folder: $SGEVAL_SCREENSHOTS if set."""
    folder = os.environ.get("SGEVAL_SCREENSHOTS")
    if not folder:
        return tmp_path_factory.mktemp("screenshots")
    os.makedirs(folder, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser(chromium, tmp_path_factory):
    options = Options()
    options.binary_location = CHROMIUM
    for arg in CHROMIUM_ARGS:
        options.add_argument(arg)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.add_argument(f"--window-size={WIDTH},{HEIGHT}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SE_OFFLINE", "true")  # Selenium Manager downloads nothing
        driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def shoot(driver, folder, name, width=WIDTH):
    """A screenshot of the whole page: the window made as tall as the document first (without a
    scroll bar, whose width would change the layout being measured)."""
    driver.execute_script("document.documentElement.style.overflow = 'hidden'")
    driver.set_window_size(width, HEIGHT)
    chrome = HEIGHT - driver.execute_script("return window.innerHeight")
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(max(height + chrome, HEIGHT), 8000))
    try:
        assert driver.save_screenshot(os.path.join(folder, name))
    finally:
        driver.set_window_size(WIDTH, HEIGHT)
        driver.execute_script("document.documentElement.style.overflow = ''")


# helpers -----------------------------------------------------------------------------------


def text(driver, element_id):
    return driver.find_element(By.ID, element_id).text


def click_and_load(driver, element, timeout=30):
    """Click (a button that sends a form, a link) and wait until the next page has loaded: the old
    page's root element gone stale, the new document complete."""
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()

    def gone(_):  # stale; Chromium may instead say "Node with given id does not belong to the document"
        try:
            old.is_enabled()
        except WebDriverException:
            return True
        return False

    wait = WebDriverWait(driver, timeout)
    wait.until(gone, "the page did not change")
    wait.until(lambda d: d.execute_script("return document.readyState") == "complete", "the page did not load")


def response_status(driver):
    """The HTTP status of the page shown (Chromium's navigation timing entry)."""
    return driver.execute_script("return performance.getEntriesByType('navigation')[0].responseStatus")


def log_in(driver, server, token):
    """A fresh session: the cookies cleared, then the token sent through /login (lands on /me)."""
    driver.get(server["url"] + "/login")
    driver.delete_all_cookies()
    driver.get(server["url"] + "/login")
    driver.find_element(By.ID, "token").send_keys(token)
    click_and_load(driver, driver.find_element(By.ID, "login"))
    assert driver.current_url == server["url"] + "/me", driver.find_element(By.TAG_NAME, "main").text


def submit_form(driver, server, method, path, paper="", code=""):
    """Fill /b/psg-demo/submit and send it; returns nothing (the browser shows the answer)."""
    driver.get(f"{server['url']}/b/{SLUG}/submit")
    driver.find_element(By.ID, "method").send_keys(method)
    if paper:
        driver.find_element(By.ID, "paper_url").send_keys(paper)
    if code:
        driver.find_element(By.ID, "code_url").send_keys(code)
    driver.find_element(By.ID, "file").send_keys(str(path))


def my_submissions(driver, server):
    """The methods listed on /me."""
    driver.get(server["url"] + "/me")
    return [cell.text for cell in driver.find_elements(By.CSS_SELECTOR, "main table.list tbody td:nth-child(3)")]


def api(server, path, token):
    reply = serve_load.call(server["url"], "GET", "/api" + path, token, timeout=10)
    assert reply.status == 200, reply.body
    return reply.json()


def on_reloading_page(action, tries=5):
    """action() on a page that reloads itself (a queued submission's): an element or script caught
    by the reload (stale, or Chromium's 'Node ... does not belong to the document') is tried again."""
    for attempt in range(tries):
        try:
            return action()
        except WebDriverException:
            if attempt == tries - 1:
                raise
            time.sleep(0.3)


def wait_until_finished(driver, timeout=90):
    """Poll #status across the page's own reloads until it is done or failed."""
    def finished(d):
        status = d.find_element(By.ID, "status").text
        return status if status in ("done", "failed") else False

    wait = WebDriverWait(driver, timeout, poll_frequency=0.25, ignored_exceptions=(WebDriverException,))
    return wait.until(finished, "the submission was still queued or running")


def query(driver):
    return urllib.parse.parse_qs(urllib.parse.urlsplit(driver.current_url).query)


def percent(value):
    return "–" if value is None else f"{100 * value:.2f}"


def index_entries(driver, server):
    """The home page's count of the benchmark's entries."""
    driver.get(server["url"] + "/")
    return int(driver.find_element(By.XPATH, f"//tr[td/a[@href='/b/{SLUG}']]/td[6]").text)


def board_rows(driver):
    """The #leaderboard rows as (method, [cell texts])."""
    rows = driver.find_elements(By.CSS_SELECTOR, "#leaderboard tbody tr")
    return [(row.find_element(By.CSS_SELECTOR, "td.method > a").text,
             [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]) for row in rows]


# the tests ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_a(server, browser, shots):
    """lab-a signs up through /signup, logs in again with the token shown, and uploads the demo's
    Model A through the submit page; returns {id, token, method} once the browser landed on it."""
    browser.get(server["url"] + "/")
    shoot(browser, shots, "index.png")
    browser.get(server["url"] + "/signup")
    browser.find_element(By.ID, "name").send_keys("lab-a")
    click_and_load(browser, browser.find_element(By.ID, "signup"))
    token = text(browser, "token")
    assert token.startswith("sgv_") and "Token for lab-a" in browser.find_element(By.TAG_NAME, "h1").text
    assert browser.current_url == server["url"] + "/token"  # POST/redirect/GET: a reload posts nothing
    browser.refresh()
    assert text(browser, "token") == token and response_status(browser) == 200
    log_in(browser, server, token)
    method = "Model A (browser)"
    submit_form(browser, server, method, server["data"] / "pred.zip", paper="https://example.org/model-a.pdf",
                code="https://example.org/model-a")
    shoot(browser, shots, "submit-form.png")
    click_and_load(browser, browser.find_element(By.ID, "send"))
    match = re.fullmatch(re.escape(server["url"]) + r"/submissions/([0-9]+)", browser.current_url)
    assert match, (browser.current_url, browser.find_element(By.TAG_NAME, "main").text)
    if on_reloading_page(lambda: text(browser, "status")) in ("queued", "running"):
        on_reloading_page(lambda: shoot(browser, shots, "submission-pending.png"))
        listed = index_entries(browser, server)  # before the board: an evaluation may finish in between
        browser.get(f"{server['url']}/b/{SLUG}")
        assert listed <= len(board_rows(browser)), "the index counts entries the board does not show yet"
        browser.get(server["url"] + f"/submissions/{match.group(1)}")
    return {"id": int(match.group(1)), "token": token, "method": method}


def test_csrf_cookie_survives_an_error_page(server, browser):
    """A 404 (the browser's own /favicon.ico, a mistyped address) keeps the cookie the open forms'
    CSRF tokens belong to."""
    browser.get(server["url"] + "/login")
    before = browser.get_cookie("sgeval_csrf")["value"]
    browser.get(server["url"] + "/no-such-page")
    assert response_status(browser) == 404
    assert browser.get_cookie("sgeval_csrf")["value"] == before


def test_upload_evaluate_leaderboard(server, browser, shots, model_a):
    url = f"{server['url']}/submissions/{model_a['id']}"
    if browser.current_url != url:  # the upload's answer, unless another test came between
        browser.get(url)
    assert wait_until_finished(browser) == "done", text(browser, "problems")
    expected = api(server, f"/submissions/{model_a['id']}", model_a["token"])["entry"]
    assert browser.find_element(By.TAG_NAME, "h1").text.startswith(model_a["method"])
    meta = browser.find_element(By.CSS_SELECTOR, "p.meta").text
    assert "submitted by lab-a" in meta and "paper" in meta and "code" in meta and "public" in meta
    facts = browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    assert f"pred.zip ({expected['size']:,} bytes)" in facts and expected["sha256"] in facts
    assert f"{expected['images_predicted']} predicted, {expected['images_missing']} without prediction" in facts

    # the metrics table: one row per protocol, the headline first, the values of the API
    table = browser.find_element(By.XPATH, "//h2[text()='Metrics']/following-sibling::table[1]")
    header = [cell.text for cell in table.find_elements(By.CSS_SELECTOR, "thead th")]
    assert header == ["Protocol", "R@20", "R@50", "R@100", "mR@20", "mR@50", "mR@100"]
    rows = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
    assert [row[0] for row in rows] == ["singlempo (headline)", "unique", "openpsg", "multimpo"]
    for row, protocol in zip(rows, ("singlempo", "unique", "openpsg", "multimpo")):
        assert row[1:] == [percent(expected["metrics"][protocol][m]) for m in header[1:]]
    assert any(cell != "0.00" for row in rows for cell in row[1:])

    # the per-predicate figure (loaded) and table
    WebDriverWait(browser, 10).until(lambda d: d.execute_script(
        "const img = document.getElementById('plot'); return img.complete && img.naturalWidth > 0"))
    assert browser.find_element(By.XPATH, "//h2[starts-with(text(), 'Per predicate')]").text == \
        "Per predicate: mR@50"
    shoot(browser, shots, "submission.png")

    # the public board: the row, its links and its audit line
    browser.get(f"{server['url']}/b/{SLUG}")
    entries = dict(board_rows(browser))
    assert set(entries) == {model_a["method"], "Model B"}
    row = browser.find_element(By.XPATH, f"//table[@id='leaderboard']//tr[.//a[text()='{model_a['method']}']]")
    assert [a.text for a in row.find_elements(By.CSS_SELECTOR, "a.link")] == ["paper", "code"]
    audit = row.find_element(By.CSS_SELECTOR, ".audit").text
    assert audit.startswith("by lab-a · audit per image: ")
    assert f"{expected['audit']['duplicate_instances']:.2f} duplicate instances" in audit
    assert f"{expected['audit']['duplicate_relations_after_merge']:.2f} duplicate relations" in audit
    missing = expected["images_missing"]
    assert f"{missing} image{'s' if missing != 1 else ''} without prediction" in audit
    headline = [cell[6] for _, cell in board_rows(browser)]  # singlempo mR@50: the default order
    assert headline == sorted(headline, key=float, reverse=True)
    shoot(browser, shots, "board.png")
    table_width = browser.execute_script("return document.getElementById('leaderboard').scrollWidth")
    assert table_width > WIDTH  # 4 protocols x 6 metrics: the table scrolls at 1400 pixels
    browser.set_window_size(table_width + 80, HEIGHT)  # a wide screen shows every column, unscrolled
    assert browser.execute_script("const box = document.querySelector('.scroll'); "
                                  "return box.scrollWidth <= box.clientWidth")
    shoot(browser, shots, "board-wide.png", width=table_width + 80)

    # sorting by a column: first descending, then ascending; the URL says so
    def column_values(index):
        return [float(cells[index]) for _, cells in board_rows(browser)]

    click_and_load(browser, browser.find_element(By.LINK_TEXT, "R@20"))
    assert query(browser) == {"sort": ["singlempo:R@20"], "order": ["desc"]}
    assert "▼" in browser.find_element(By.CSS_SELECTOR, "#leaderboard th.sorted").text
    descending = [name for name, _ in board_rows(browser)]
    assert column_values(2) == sorted(column_values(2), reverse=True)
    click_and_load(browser, browser.find_element(By.CSS_SELECTOR, "#leaderboard th.sorted a"))
    assert query(browser) == {"sort": ["singlempo:R@20"], "order": ["asc"]}
    assert column_values(2) == sorted(column_values(2))
    if len(set(column_values(2))) > 1:
        assert [name for name, _ in board_rows(browser)] == descending[::-1]
    shoot(browser, shots, "board-sorted.png")
    assert index_entries(browser, server) == 2


def broken_prediction(demo_data, path):
    """The demo's Model A as one JSON file, its first record without 'triplets' and its second
    naming category 999; returns the two image ids."""
    with zipfile.ZipFile(demo_data / "pred.zip") as archive:
        data = json.loads(archive.read("triplets.json"))
    images = data["images"][:3]
    del images[0]["triplets"]
    images[1]["instances"][0]["category"] = 999
    path.write_text(json.dumps({"version": 1, "images": images}))
    return images[0]["id"], images[1]["id"]


def test_bad_upload_problems_page(server, browser, shots, model_a):
    log_in(browser, server, model_a["token"])
    before = my_submissions(browser, server)
    path = server["folder"] / "broken-pred.json"
    first, second = broken_prediction(server["data"], path)
    submit_form(browser, server, "Broken model", path)
    click_and_load(browser, browser.find_element(By.ID, "send"))
    assert response_status(browser) == 422
    assert browser.current_url == f"{server['url']}/b/{SLUG}/submissions"
    problems = browser.find_element(By.ID, "problems")
    assert "Nothing was queued" in problems.text
    lines = [item.text for item in problems.find_elements(By.TAG_NAME, "li")]
    assert f"broken-pred.json: image {first}: missing field 'triplets' (an empty list is valid)" in lines
    assert any(line.startswith(f"broken-pred.json: image {second}: instance 0 [999] is out of range") and
               "only 133 categories exist" in line for line in lines), lines
    assert not any(str(server["folder"]) in line or "psg.json" in line for line in lines)  # no server path
    assert browser.find_element(By.ID, "method").get_attribute("value") == "Broken model"  # kept for a retry
    shoot(browser, shots, "bad-upload.png")
    assert my_submissions(browser, server) == before
    shoot(browser, shots, "me.png")


def test_wrong_format_and_missing_csrf(server, browser, shots, model_a):
    log_in(browser, server, model_a["token"])
    before = my_submissions(browser, server)
    notes = server["folder"] / "notes.txt"
    notes.write_text("these are not predictions\n")
    submit_form(browser, server, "Notes", notes)
    click_and_load(browser, browser.find_element(By.ID, "send"))
    assert response_status(browser) == 400
    assert [item.text for item in browser.find_elements(By.CSS_SELECTOR, "#problems li")] == \
        ["notes.txt: not a ZIP archive or a JSON file"]
    assert browser.find_element(By.ID, "method").get_attribute("value") == "Notes"  # the form is kept
    shoot(browser, shots, "wrong-format.png")

    # the submit form with its CSRF field removed: refused before the file is read
    submit_form(browser, server, "No token", server["data"] / "pred-b.zip")
    browser.execute_script("document.querySelector('form.submit input[name=csrf]').remove()")
    click_and_load(browser, browser.find_element(By.ID, "send"))
    assert response_status(browser) == 403
    assert "did not come from this site" in text(browser, "problems")
    assert my_submissions(browser, server) == before

    # a form of another page's making, posted to an action without the token
    browser.execute_script("""
        const form = document.createElement('form'), button = document.createElement('button');
        form.method = 'post'; form.action = arguments[0]; button.id = 'forged';
        form.appendChild(button); document.body.appendChild(form);""", f"/submissions/{model_a['id']}/unpublish")
    click_and_load(browser, browser.find_element(By.ID, "forged"))
    assert browser.current_url == f"{server['url']}/submissions/{model_a['id']}/unpublish"
    assert response_status(browser) == 403
    assert browser.find_element(By.TAG_NAME, "h1").text == "Not allowed"
    assert "did not come from this site" in text(browser, "problems")
    shoot(browser, shots, "csrf-refused.png")
    assert api(server, f"/submissions/{model_a['id']}", model_a["token"])["entry"]["public"] is True


def test_admin_approves(server, browser, shots, model_a):
    log_in(browser, server, server["admin"])
    browser.get(f"{server['url']}/b/{SLUG}/approved")
    assert browser.find_element(By.CSS_SELECTOR, "p.empty").text == "No entries yet."
    browser.get(f"{server['url']}/submissions/{model_a['id']}")
    assert wait_until_finished(browser) == "done"
    click_and_load(browser, browser.find_element(By.ID, "action-approve"))
    assert browser.current_url == f"{server['url']}/submissions/{model_a['id']}"
    assert "approved" in browser.find_element(By.CSS_SELECTOR, "p.meta .badge").text
    assert browser.find_elements(By.ID, "action-unapprove")
    browser.get(f"{server['url']}/b/{SLUG}/approved")
    assert [name for name, _ in board_rows(browser)] == [model_a["method"]]  # Model B was not approved
    assert browser.find_element(By.CSS_SELECTOR, ".tabs a.current").text == "Approved board"
    assert browser.find_element(By.CSS_SELECTOR, "#leaderboard td.method .badge").text == "approved"
    shoot(browser, shots, "approved.png")
    browser.get(server["url"] + "/admin")
    shoot(browser, shots, "admin.png")
