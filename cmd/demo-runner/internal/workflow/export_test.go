package workflow

// BootClockForTest exposes the supervisor's clock to the tests.
var BootClockForTest = bootClock
