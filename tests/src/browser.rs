//! A real headless Chromium for the dashboard's tests, driven over WebDriver.
//!
//! [`Browser::start`] runs Debian's `chromedriver` (package `chromium-driver`) on a free
//! loopback port and opens a session of `/usr/bin/chromium` (package `chromium`), headless, in
//! a profile of its own; dropping the browser ends the session and the driver. A missing
//! driver or browser fails the test (`scripts/test` installs both).
//!
//! The W3C WebDriver protocol is JSON over HTTP, and the few commands the tests use (go to a
//! URL, find elements by CSS selector, read their text, click, type, run a script, take a
//! screenshot) are spoken here with the harness's own reqwest client. A WebDriver crate
//! (fantoccini) was tried first: its dependency tree adds procedural macros that change the
//! build fingerprint of RocksDB's bindings, so every build would compile RocksDB's C++ again.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::ports;
use crate::tools;
use crate::wait::poll_until;

/// The browser binary of Debian's `chromium` package.
const CHROMIUM: &str = "/usr/bin/chromium";
/// The W3C key of an element reference in a WebDriver answer.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long the driver may take to listen, and one command to be answered.
const DRIVER_TIMEOUT: Duration = Duration::from_secs(30);

/// A headless Chromium session.
pub struct Browser {
    driver: Child,
    http: reqwest::Client,
    session: String,
    /// The driver's URL, `http://127.0.0.1:<port>`.
    root: String,
    /// The session's base URL, `<root>/session/<id>`.
    base: String,
    _profile: tempfile::TempDir,
}

/// An element of the current page.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Browser {
    /// Starts chromedriver and a headless Chromium session with a 1280×900 window.
    ///
    /// # Panics
    ///
    /// When chromedriver or Chromium is missing, or the session cannot be created.
    pub async fn start() -> Browser {
        let driver_binary = tools::require("chromedriver");
        assert!(
            Path::new(CHROMIUM).is_file(),
            "{CHROMIUM} is missing: install Debian's `chromium` package (scripts/test does)"
        );
        let port = ports::allocate(1)[0];
        let driver = Command::new(&driver_binary)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("start {}: {error}", driver_binary.display()));
        let http = crate::http::client_builder()
            .timeout(DRIVER_TIMEOUT)
            .build()
            .expect("build the WebDriver client");
        let root = format!("http://127.0.0.1:{port}");
        let ready = poll_until(DRIVER_TIMEOUT, Duration::from_millis(100), || async {
            let answer = http.get(format!("{root}/status")).send().await;
            match answer {
                Ok(response) if response.status().is_success() => Ok(()),
                Ok(response) => Err(format!("status {}", response.status())),
                Err(error) => Err(error.to_string()),
            }
        })
        .await;
        if let Err(last) = ready {
            panic!("chromedriver did not answer on port {port} within {DRIVER_TIMEOUT:?}: {last}");
        }
        let profile = tempfile::Builder::new()
            .prefix("tickd-chromium-")
            .tempdir()
            .expect("a profile directory for chromium");
        let capabilities = json!({
            "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": CHROMIUM,
                    "args": [
                        "--headless=new", "--no-sandbox", "--disable-gpu",
                        "--disable-dev-shm-usage", "--window-size=1280,900",
                        format!("--user-data-dir={}", profile.path().display()),
                    ],
                },
            }},
        });
        let created = command(
            &http,
            reqwest::Method::POST,
            &format!("{root}/session"),
            &capabilities,
        )
        .await
        .unwrap_or_else(|error| panic!("create a chromium session: {error}"));
        let session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("a session id in {created}"))
            .to_owned();
        Browser {
            driver,
            http,
            base: format!("{root}/session/{session}"),
            root,
            session,
            _profile: profile,
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &Value,
    ) -> Result<Value, String> {
        command(&self.http, method, &format!("{}{path}", self.base), body).await
    }

    /// Opens `url` and waits for its load.
    pub async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", &json!({ "url": url }))
            .await
            .unwrap_or_else(|error| panic!("open {url}: {error}"));
    }

    /// The elements matching a CSS selector, in document order.
    pub async fn find_all(&self, selector: &str) -> Vec<Element> {
        let body = json!({ "using": "css selector", "value": selector });
        let found = self
            .call(reqwest::Method::POST, "/elements", &body)
            .await
            .unwrap_or_else(|error| panic!("find {selector}: {error}"));
        found
            .as_array()
            .map(|elements| {
                elements
                    .iter()
                    .filter_map(|element| element[ELEMENT_KEY].as_str())
                    .map(|id| Element(id.to_owned()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The visible text of an element (empty when it has gone since it was found).
    pub async fn text(&self, element: &Element) -> String {
        let path = format!("/element/{}/text", element.0);
        self.call(reqwest::Method::GET, &path, &Value::Null)
            .await
            .ok()
            .and_then(|text| text.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// Clicks an element.
    pub async fn click(&self, element: &Element) -> Result<(), String> {
        let path = format!("/element/{}/click", element.0);
        self.call(reqwest::Method::POST, &path, &json!({}))
            .await
            .map(drop)
    }

    /// Types `text` into an element.
    pub async fn type_into(&self, element: &Element, text: &str) {
        let path = format!("/element/{}/value", element.0);
        self.call(reqwest::Method::POST, &path, &json!({ "text": text }))
            .await
            .unwrap_or_else(|error| panic!("type into an element: {error}"));
    }

    /// Runs `script` (a function body) in the page and returns what it returns.
    pub async fn run(&self, script: &str) -> Value {
        let body = json!({ "script": script, "args": [] });
        self.call(reqwest::Method::POST, "/execute/sync", &body)
            .await
            .unwrap_or_else(|error| panic!("run a script: {error}"))
    }

    /// The page's address as the browser shows it.
    pub async fn url(&self) -> String {
        let url = self
            .call(reqwest::Method::GET, "/url", &Value::Null)
            .await
            .unwrap_or_else(|error| panic!("read the address: {error}"));
        url.as_str().unwrap_or_default().to_owned()
    }

    /// Saves a PNG of the window under `target/screenshots/<name>.png` (the workspace's
    /// `target/`, for review after the run); its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let encoded = self
            .call(reqwest::Method::GET, "/screenshot", &Value::Null)
            .await
            .unwrap_or_else(|error| panic!("take a screenshot: {error}"));
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap_or_default())
            .unwrap_or_else(|error| panic!("the screenshot is not base64: {error}"));
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("target")
            .join("screenshots");
        std::fs::create_dir_all(&dir).expect("create target/screenshots");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write the screenshot");
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session closes chromium (killing the driver alone would leave it
        // running). Drop cannot await, so the DELETE is written by hand on a blocking socket.
        let _ = end_session(&self.root, &self.session);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// `DELETE /session/<id>` on the driver at `root` (`http://127.0.0.1:<port>`), waiting for
/// the answer.
fn end_session(root: &str, session: &str) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let address = root.trim_start_matches("http://");
    let mut socket = std::net::TcpStream::connect(address)?;
    socket.set_read_timeout(Some(DRIVER_TIMEOUT))?;
    write!(
        socket,
        "DELETE /session/{session} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    )?;
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer)?;
    Ok(())
}

/// Sends one WebDriver command; its `value`, or the driver's error.
async fn command(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: &Value,
) -> Result<Value, String> {
    let mut request = http.request(method, url);
    if !body.is_null() {
        request = request.json(body);
    }
    let response = request.send().await.map_err(|error| error.to_string())?;
    let status = response.status();
    let answer: Value = response.json().await.map_err(|error| error.to_string())?;
    if status.is_success() {
        Ok(answer["value"].clone())
    } else {
        Err(format!("{status}: {}", answer["value"]))
    }
}
