// kafkajs with its defaults, as tests/kafka/test_clients_kafkajs.py drives it:
//
//   node clients.js NODE_MODULES BOOTSTRAP produce '{"topic": "t", "from": 0, "count": 100}'
//   node clients.js NODE_MODULES BOOTSTRAP consume '{"topic": "t", "group": "g", "count": 100}'
//   node clients.js NODE_MODULES BOOTSTRAP admin   '{"topic": "t", "group": "g"}'
//
// NODE_MODULES is where `npm ci` put kafkajs (a cache outside the checkout,
// tests/kafka_clients.py). Prints one JSON document; a call that fails is answered
// with its error's type, and a call that does not answer in 20 s with "timeout".
'use strict'
const path = require('path')
const [modules, bootstrap, command, json] = process.argv.slice(2)
const { Kafka, logLevel, ConfigResourceTypes } = require(path.join(modules, 'kafkajs'))

const args = JSON.parse(json)
const kafka = new Kafka({ clientId: 'tidelog-tests', brokers: [bootstrap], logLevel: logLevel.NOTHING })
const CALL_TIMEOUT_MS = 20000

// A call's answer, or the type of its error, or "timeout" (kafkajs's resetOffsets once
// retried a refused commit forever).
async function step (call) {
  let timer
  const timeout = new Promise(resolve => { timer = setTimeout(() => resolve('timeout'), CALL_TIMEOUT_MS) })
  try {
    const out = await Promise.race([call(), timeout])
    return out === undefined ? 'ok' : out
  } catch (e) {
    return e.type || e.name
  } finally {
    clearTimeout(timer)
  }
}

async function until (call, want) {
  const deadline = Date.now() + 10000
  for (;;) {
    const got = await step(call)
    if (JSON.stringify(got) === JSON.stringify(want) || Date.now() > deadline) return got
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}

async function produce () {
  const producer = kafka.producer()
  await producer.connect()
  const messages = []
  for (let n = args.from || 0; n < (args.from || 0) + args.count; n++) {
    messages.push({ key: `k${n}`, value: `v${n}`, headers: { n: `k${n}` } })
  }
  const sent = await producer.send({ topic: args.topic, messages })
  await producer.disconnect()
  // kafkajs answers a batch's first offset a partition; its records follow in order.
  return { batches: sent.map(r => [r.partition, Number(r.baseOffset), r.errorCode]) }
}

async function consume () {
  const consumer = kafka.consumer({ groupId: args.group })
  await consumer.connect()
  await consumer.subscribe({ topic: args.topic, fromBeginning: true })
  const seen = []
  let finished
  const done = new Promise(resolve => { finished = resolve })
  const timer = setTimeout(finished, 30000)
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      seen.push([partition, Number(message.offset), message.key.toString(), message.value.toString(),
        Object.entries(message.headers).map(([k, v]) => [k, v.toString()])])
      if (seen.length >= args.count) finished()
    }
  })
  await done
  clearTimeout(timer)
  await consumer.disconnect() // commits what eachMessage resolved (autoCommit, the default)
  return { records: seen }
}

async function admin () {
  const a = kafka.admin()
  await a.connect()
  const t = args.topic
  const g = args.group
  const steps = {}
  const partitions = async () => (await a.fetchTopicMetadata({ topics: [t] })).topics[0].partitions.length
  const configs = async () => {
    const described = await a.describeConfigs({
      resources: [{ type: ConfigResourceTypes.TOPIC, name: t, configNames: ['retention.ms', 'cleanup.policy'] }],
      includeSynonyms: false
    })
    return described.resources[0].configEntries
      .map(e => [e.configName, e.configValue, e.isDefault, e.configSource])
      .sort()
  }
  const offsets = async () => (await a.fetchTopicOffsets(t)).filter(p => p.partition === 0).map(p => [p.low, p.high])
  const committed = async () => (await a.fetchOffsets({ groupId: g, topics: [t] }))[0].partitions
    .map(p => [p.partition, p.offset, p.metadata]).sort()

  steps.create_topics = await step(() => a.createTopics({ topics: [{ topic: t, numPartitions: 2 }], waitForLeaders: true }))
  steps.list_topics = await until(async () => (await a.listTopics()).includes(t), true)
  steps.partitions = await until(partitions, 2)
  steps.create_partitions = await step(() => a.createPartitions({ topicPartitions: [{ topic: t, count: 3 }] }))
  steps.after_create_partitions = await until(partitions, 3)
  steps.describe_configs = await step(configs)
  steps.alter_configs = await step(async () => {
    await a.alterConfigs({
      validateOnly: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: t, configEntries: [{ name: 'retention.ms', value: '3600000' }] }]
    })
  })
  steps.after_alter_configs = await step(configs)

  const producer = kafka.producer()
  await producer.connect()
  await producer.send({ topic: t, messages: Array.from({ length: 10 }, (_, n) => ({ partition: 0, value: `v${n}` })) })
  await producer.disconnect()
  steps.fetch_topic_offsets = await step(offsets)
  steps.delete_topic_records = await step(() => a.deleteTopicRecords({ topic: t, partitions: [{ partition: 0, offset: '3' }] }))
  steps.after_delete_topic_records = await step(offsets)

  steps.set_offsets = await step(() => a.setOffsets({ groupId: g, topic: t, partitions: [{ partition: 0, offset: '5' }] }))
  steps.fetch_offsets = await step(committed)
  steps.reset_offsets_earliest = await step(() => a.resetOffsets({ groupId: g, topic: t, earliest: true }))
  steps.after_reset_earliest = await step(committed)
  steps.reset_offsets_latest = await step(() => a.resetOffsets({ groupId: g, topic: t }))
  steps.after_reset_latest = await step(committed)
  steps.list_groups = await step(async () => (await a.listGroups()).groups.filter(x => x.groupId === g).map(x => x.protocolType))
  steps.describe_groups = await step(async () => (await a.describeGroups([g])).groups.map(x => [x.state, x.protocolType, x.members.length]))
  steps.delete_groups = await step(async () => (await a.deleteGroups([g])).map(x => [x.groupId === g, x.errorCode]))
  steps.after_delete_groups = await step(async () => (await a.listGroups()).groups.filter(x => x.groupId === g).length)
  steps.describe_cluster = await step(async () => {
    const c = await a.describeCluster()
    return [c.brokers.length, c.controller === c.brokers[0].nodeId]
  })
  steps.delete_topics = await step(() => a.deleteTopics({ topics: [t] }))
  steps.after_delete_topics = await until(async () => (await a.listTopics()).includes(t), false)
  await a.disconnect()
  return steps
}

const commands = { produce, consume, admin }
commands[command]().then(
  out => { process.stdout.write(JSON.stringify(out) + '\n'); process.exit(0) },
  e => { process.stderr.write(`${e.stack}\n`); process.exit(1) }
)
