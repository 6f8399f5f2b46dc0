package tidelog.tests;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;

/**
 * Apache Kafka's Java client with its defaults, as tests/kafka/test_clients_java.py drives it:
 *
 * <pre>
 * Clients BOOTSTRAP produce '{"topic": "t", "from": 0, "count": 100}'
 * Clients BOOTSTRAP consume '{"topic": "t", "group": "g", "count": 100}'
 * Clients BOOTSTRAP admin   '{"topic": "t", "group": "g"}'
 * </pre>
 *
 * Each prints one JSON document; a call that fails is answered with its exception's class name.
 */
public final class Clients {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Duration WAIT = Duration.ofSeconds(30);

  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      System.err.println("usage: Clients BOOTSTRAP produce|consume|admin JSON");
      System.exit(2);
    }
    @SuppressWarnings("unchecked")
    Map<String, Object> a = JSON.readValue(args[2], Map.class);
    Object out =
        switch (args[1]) {
          case "produce" -> produce(args[0], a);
          case "consume" -> consume(args[0], a);
          case "admin" -> admin(args[0], a);
          default -> throw new IllegalArgumentException("no command " + args[1]);
        };
    System.out.println(JSON.writeValueAsString(out));
  }

  private static Properties settings(String bootstrap) {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    return p;
  }

  private static KafkaProducer<String, String> producer(String bootstrap) {
    Properties p = settings(bootstrap);
    p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
    p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
    return new KafkaProducer<>(p);
  }

  /** Keyed records k<n>/v<n> with a header (the default partitioner): where each landed. */
  static Object produce(String bootstrap, Map<String, Object> a) throws Exception {
    int from = (Integer) a.getOrDefault("from", 0);
    int count = (Integer) a.get("count");
    List<Future<RecordMetadata>> sent = new ArrayList<>();
    try (KafkaProducer<String, String> producer = producer(bootstrap)) {
      for (int n = from; n < from + count; n++) {
        ProducerRecord<String, String> r =
            new ProducerRecord<>((String) a.get("topic"), "k" + n, "v" + n);
        r.headers().add("n", ("k" + n).getBytes());
        sent.add(producer.send(r));
      }
      List<List<Object>> landed = new ArrayList<>();
      for (int i = 0; i < sent.size(); i++) {
        RecordMetadata m = sent.get(i).get();
        landed.add(List.of(m.partition(), m.offset(), "k" + (from + i)));
      }
      return Map.of("records", landed);
    }
  }

  /**
   * A member of the group (defaults, but the start of a partition with no commit) polls until
   * `count` records came or 30 s passed, then closes: its autocommit commits on closing.
   */
  static Object consume(String bootstrap, Map<String, Object> a) {
    Properties p = settings(bootstrap);
    p.put("group.id", a.get("group"));
    p.put("auto.offset.reset", "earliest");
    p.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
    p.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
    int count = (Integer) a.get("count");
    List<List<Object>> seen = new ArrayList<>();
    long deadline = System.nanoTime() + WAIT.toNanos();
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
      consumer.subscribe(List.of((String) a.get("topic")));
      while (seen.size() < count && System.nanoTime() < deadline) {
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
          List<Object> headers = new ArrayList<>();
          for (Header h : r.headers()) {
            headers.add(List.of(h.key(), new String(h.value())));
          }
          seen.add(List.of(r.partition(), r.offset(), r.key(), r.value(), headers));
        }
      }
    }
    return Map.of("records", seen);
  }

  /** Every Admin call the Kafka guide claims, in order: each step's answer as values. */
  static Object admin(String bootstrap, Map<String, Object> a) throws Exception {
    String t = (String) a.get("topic");
    String g = (String) a.get("group");
    TopicPartition p0 = new TopicPartition(t, 0);
    ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, t);
    Map<String, Object> steps = new TreeMap<>();
    try (Admin admin = Admin.create(settings(bootstrap))) {
      steps.put("create_topics", step(() -> admin.createTopics(List.of(new NewTopic(t, 2, (short) 1))).all().get()));
      steps.put("list_topics", until(() -> partitions(admin, t), 2));
      steps.put("describe_topics", step(() -> admin.describeTopics(List.of(t)).allTopicNames().get().get(t).partitions().size()));
      steps.put("create_partitions", step(() -> admin.createPartitions(Map.of(t, NewPartitions.increaseTo(3))).all().get()));
      steps.put("after_create_partitions", until(() -> partitions(admin, t), 3));
      steps.put("describe_configs", step(() -> configs(admin, resource)));
      AlterConfigOp set = new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET);
      steps.put("incremental_alter_configs", step(() -> admin.incrementalAlterConfigs(Map.of(resource, List.of(set))).all().get()));
      steps.put("after_incremental_alter_configs", step(() -> configs(admin, resource)));
      AlterConfigOp delete = new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE);
      steps.put("incremental_alter_configs_delete", step(() -> admin.incrementalAlterConfigs(Map.of(resource, List.of(delete))).all().get()));
      steps.put("after_incremental_alter_configs_delete", step(() -> configs(admin, resource)));
      try (KafkaProducer<String, String> producer = producer(bootstrap)) {
        for (int n = 0; n < 10; n++) {
          producer.send(new ProducerRecord<>(t, 0, null, "v" + n)).get();
        }
      }
      steps.put("list_offsets", step(() -> offsets(admin, p0)));
      steps.put("delete_records", step(() -> admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(3))).lowWatermarks().get(p0).get().lowWatermark()));
      steps.put("after_delete_records", step(() -> offsets(admin, p0)));
      steps.put("alter_consumer_group_offsets", step(() -> admin.alterConsumerGroupOffsets(g, Map.of(p0, new OffsetAndMetadata(5, "java"))).all().get()));
      steps.put("list_consumer_group_offsets", step(() -> committed(admin, g)));
      steps.put("list_groups", step(() -> {
        List<Object> found = new ArrayList<>();
        for (GroupListing l : admin.listGroups().all().get()) {
          if (l.groupId().equals(g)) {
            found.add(List.of(String.valueOf(l.type().orElse(null)), l.protocol(), String.valueOf(l.groupState().orElse(null))));
          }
        }
        return found;
      }));
      steps.put("describe_consumer_groups", step(() -> {
        var d = admin.describeConsumerGroups(List.of(g)).describedGroups().get(g).get();
        return List.of(d.groupState().toString(), d.isSimpleConsumerGroup(), d.members().size(), d.partitionAssignor());
      }));
      steps.put("delete_consumer_group_offsets", step(() -> admin.deleteConsumerGroupOffsets(g, Set.of(p0)).all().get()));
      steps.put("after_delete_consumer_group_offsets", step(() -> committed(admin, g)));
      steps.put("delete_consumer_groups", step(() -> admin.deleteConsumerGroups(List.of(g)).all().get()));
      steps.put("describe_cluster", step(() -> {
        DescribeClusterResult c = admin.describeCluster();
        return List.of(c.nodes().get().size(), c.controller().get().id() == c.nodes().get().iterator().next().id());
      }));
      steps.put("delete_topics", step(() -> admin.deleteTopics(List.of(t)).all().get()));
      steps.put("after_delete_topics", until(() -> admin.listTopics().names().get().contains(t) ? 1 : 0, 0));
    }
    return steps;
  }

  interface Call {
    Object call() throws Exception;
  }

  /** A call's answer ("ok" for none), or the name of what it threw. */
  static Object step(Call c) {
    try {
      Object out = c.call();
      return out == null ? "ok" : out;
    } catch (ExecutionException e) {
      return e.getCause().getClass().getSimpleName();
    } catch (Exception e) {
      return e.getClass().getSimpleName();
    }
  }

  /** Repeat a call until it answers `want` (Kafka's brokers learn of a change from the
   * controller a moment after it is answered), for 10 s at most; its last answer. */
  static Object until(Call c, Object want) throws InterruptedException {
    long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    while (true) {
      Object got = step(c);
      if (got.equals(want) || System.nanoTime() > deadline) {
        return got;
      }
      Thread.sleep(50);
    }
  }

  static Object partitions(Admin admin, String t) throws Exception {
    return admin.describeTopics(List.of(t)).allTopicNames().get().get(t).partitions().size();
  }

  static Object configs(Admin admin, ConfigResource resource) throws Exception {
    Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
    Map<String, Object> out = new TreeMap<>();
    for (String name : List.of("retention.ms", "cleanup.policy")) {
      ConfigEntry e = config.get(name);
      out.put(name, e == null ? null : List.of(e.value(), e.source().toString(), e.isDefault()));
    }
    return out;
  }

  static Object offsets(Admin admin, TopicPartition tp) throws Exception {
    List<Object> out = new ArrayList<>();
    for (OffsetSpec spec : List.of(OffsetSpec.earliest(), OffsetSpec.latest(), OffsetSpec.maxTimestamp())) {
      out.add(admin.listOffsets(Map.of(tp, spec)).partitionResult(tp).get().offset());
    }
    return out;
  }

  static Object committed(Admin admin, String g) throws Exception {
    Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(g).partitionsToOffsetAndMetadata().get();
    List<Object> out = new ArrayList<>();
    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
      out.add(List.of(e.getKey().partition(), e.getValue().offset(), e.getValue().metadata()));
    }
    return out;
  }

  private Clients() {}
}
