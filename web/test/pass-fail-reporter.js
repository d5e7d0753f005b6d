// Prints one "PASS name" / "FAIL name: why" / "SKIP name: why" line per
// test, the project's test-output convention (tests/run counts these lines).
export default class PassFailReporter {
  onTestCaseResult(testCase) {
    const result = testCase.result();
    const name = `web/unit/${testCase.module.moduleId.replace(/^.*\/test\//, '').replace(/\.test\.jsx?$/, '')}: ${testCase.fullName}`;
    if (result.state === 'passed') console.log(`PASS ${name}`);
    else if (result.state === 'failed') {
      const why = (result.errors && result.errors[0] && result.errors[0].message) || 'failed';
      console.log(`FAIL ${name}: ${why.split('\n')[0]}`);
    } else if (result.state === 'skipped') {
      console.log(`SKIP ${name}: ${result.note || `marked ${testCase.options.mode}`}`);
    }
  }
  onTestRunEnd(modules, errors) {
    for (const e of errors || []) console.log(`FAIL web/unit: ${String(e && e.message || e).split('\n')[0]}`);
    for (const m of modules || []) {
      for (const e of (m.errors ? m.errors() : [])) console.log(`FAIL web/unit/${m.moduleId}: ${String(e.message).split('\n')[0]}`);
    }
  }
}
