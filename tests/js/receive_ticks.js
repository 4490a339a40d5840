// Drives the published Ticktok JavaScript client (npm `ticktok`) against a tickd node.
//
//   node receive_ticks.js DOMAIN TOKEN NAME SCHEDULE COUNT
//
// Schedules the clock with `client.schedule`, prints each tick the client hands to its callback
// as one JSON line on stdout, and exits 0 after COUNT ticks. A failed schedule or a tick error
// is printed on stderr and exits 1; COUNT ticks not received within 20 s exits 2.
'use strict'

const ticktok = require('ticktok')

const [domain, token, name, schedule, countArg] = process.argv.slice(2)
const count = Number(countArg)
if (!domain || !token || !name || !schedule || !(count > 0)) {
  console.error('usage: node receive_ticks.js DOMAIN TOKEN NAME SCHEDULE COUNT')
  process.exit(64)
}

const HARD_TIMEOUT_MS = 20000
const startedAt = Date.now()
const client = ticktok(domain, token)
let received = 0
let finished = false

const describe = (err) => (err && err.stack) || String(err)

const finish = async(code, message) => {
  if (finished) return
  finished = true
  if (message) console.error(message)
  try {
    await client.disconnect()
  } catch (err) {
    console.error(`disconnect failed: ${describe(err)}`)
  }
  process.exit(code)
}

setTimeout(() => {
  console.error(`timeout: ${received} of ${count} ticks after ${HARD_TIMEOUT_MS} ms`)
  process.exit(2)
}, HARD_TIMEOUT_MS)

const onTick = (err, tick) => {
  if (finished) return
  if (err) {
    finish(1, `tick error after ${Date.now() - startedAt} ms: ${describe(err)}`)
    return
  }
  received++
  process.stdout.write(JSON.stringify(tick) + '\n')
  if (received >= count) finish(0)
}

client.schedule({ name, schedule }, onTick).catch((err) => {
  const cause = err && err.cause
  const response = cause && cause.response
  const detail = response
    ? ` (HTTP ${response.status}: ${JSON.stringify(response.data)})`
    : ''
  finish(1, `schedule failed${detail}: ${describe(err)}`)
})
