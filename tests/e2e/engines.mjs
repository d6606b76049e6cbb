// The three engines a visitor's browser may run, driven the same way by the end-to-end tests:
// Chromium through Playwright (Debian's /usr/bin/chromium), Firefox ESR through geckodriver and
// WebKitGTK's MiniBrowser through WebKitWebDriver, both with selenium-webdriver (W3C WebDriver:
// Playwright drives only its own builds of Firefox and WebKit, which cannot be downloaded here).
// WebKit needs a display: run it under `xvfb-run -a`.
//
//   const browser = await openBrowser("firefox");
//   const tab = await browser.newTab(url);          // a new tab, loaded
//   await tab.waitFor(() => window.__ready);        // a function run in the page, polled
//   await tab.evaluate(() => window.__x);           // its value
//   await tab.close();                              // the tab closes (pagehide, as a visitor's)
//   await browser.close();
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { freePort, launchChromium, sleep } from "../../scripts/harness.mjs";

export const ENGINES = ["chromium", "firefox", "webkit"];

const MINIBROWSER = ["/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser",
  "/usr/lib/x86_64-linux-gnu/webkit2gtk-4.0/MiniBrowser"].find(existsSync);

/** The engine the tests run in: `TERNFLOW_E2E_ENGINE` (default chromium). */
export function engineFromEnv() {
  const e = process.env.TERNFLOW_E2E_ENGINE ?? "chromium";
  if (!ENGINES.includes(e)) throw new Error(`TERNFLOW_E2E_ENGINE=${e}: one of ${ENGINES.join(", ")}`);
  return e;
}

export async function openBrowser(engine) {
  if (engine === "chromium") return chromium();
  return webdriver(engine);
}

async function chromium() {
  const browser = await launchChromium();
  return {
    engine: "chromium",
    async newTab(url) {
      const page = await browser.newPage();
      page.on("console", (m) => { if (m.type() === "error") console.error(`[tab] ${m.text()}`); });
      await page.goto(url);
      return {
        evaluate: (fn) => page.evaluate(fn),
        waitFor: (fn, timeout = 120_000) => page.waitForFunction(fn, null, { timeout, polling: 100 }),
        close: () => page.close(),
      };
    },
    close: () => browser.close(),
  };
}

async function webdriver(engine) {
  const { Builder } = await import("selenium-webdriver");
  let driver, driverProc = null;
  if (engine === "firefox") {
    const firefox = await import("selenium-webdriver/firefox.js");
    const gecko = process.env.GECKODRIVER ?? "geckodriver";
    const opts = new firefox.Options().setBinary("/usr/bin/firefox-esr").addArguments("-headless");
    driver = await new Builder().forBrowser("firefox").setFirefoxOptions(opts)
      .setFirefoxService(new firefox.ServiceBuilder(gecko)).build();
  } else {
    if (!MINIBROWSER) throw new Error("no MiniBrowser: apt-get install webkit2gtk-driver");
    const port = await freePort();
    driverProc = spawn("WebKitWebDriver", [`--port=${port}`], { stdio: "ignore" });
    for (let i = 0; ; i++) {
      try { if ((await fetch(`http://127.0.0.1:${port}/status`)).ok) break; } catch { /* not yet */ }
      if (i > 100) throw new Error("WebKitWebDriver did not start");
      await sleep(100);
    }
    driver = await new Builder().usingServer(`http://127.0.0.1:${port}`).withCapabilities({
      browserName: "MiniBrowser",
      "webkitgtk:browserOptions": { binary: MINIBROWSER, args: ["--automation"] },
    }).build();
  }
  // The first window stays open (closing a session's last window ends the session).
  const home = await driver.getWindowHandle();
  const run = async (handle, fn) => {
    await driver.switchTo().window(handle);
    return driver.executeScript(`return (${fn.toString()})();`);
  };
  return {
    engine,
    async newTab(url) {
      // A window, not a tab: a background tab is hidden, and the worker claims nothing while it is.
      await driver.switchTo().newWindow("window");
      const handle = await driver.getWindowHandle();
      await driver.get(url);
      return {
        evaluate: (fn) => run(handle, fn),
        async waitFor(fn, timeout = 120_000) {
          for (const t0 = Date.now(); ; await sleep(100)) {
            const v = await run(handle, fn);
            if (v) return v;
            if (Date.now() - t0 > timeout) throw new Error(`timed out after ${timeout} ms waiting for ${fn}`);
          }
        },
        async close() {
          await driver.switchTo().window(handle);
          await driver.close();
          await driver.switchTo().window(home);
        },
      };
    },
    async close() {
      try { await driver.quit(); } finally { driverProc?.kill(); }
    },
  };
}
