# web suite: the gallery's Vitest unit/component tests, then the Playwright
# end-to-end run in Debian's Chromium against the real stack (tests/e2e).
# Sourced by tests/run (uses run_one, MMH3_SRC, MMH3_BUILD).
web_src="$MMH3_SRC/web"

web_prepare() {
  command -v npm >/dev/null 2>&1 || { echo "FAIL web/npm: npm is not installed (apt-get install nodejs npm)"; return 1; }
  if [ ! -f "$web_src/node_modules/.package-lock.json" ] || [ "$web_src/package-lock.json" -nt "$web_src/node_modules/.package-lock.json" ]; then
    (cd "$web_src" && npm ci --no-audit --no-fund --loglevel=error) || { echo "FAIL web/npm: npm ci failed"; return 1; }
  fi
  echo "PASS web/npm ci"
}

web_unit() {
  web_prepare || return 1
  cd "$web_src" && MMH3_PASSFAIL=1 npm exec --offline -- vitest run
}

run_one web/unit web_unit
if [ -f "$MMH3_SRC/tests/e2e/run.sh" ]; then
  run_one web/e2e bash "$MMH3_SRC/tests/e2e/run.sh"
  echo "  web/e2e artefacts: screenshots in tests/out/e2e/screens/ (desktop-1440-*, desktop-1920-*, phone-*), axe reports in tests/out/e2e/a11y-*.json"
fi
