// sarama with its defaults (but for what a program must set: SyncProducer's
// Return.Successes, and the oldest offset for a group with no commit), as
// tests/kafka/test_clients_go.py drives it:
//
//	sarama BOOTSTRAP produce '{"topic": "t", "from": 0, "count": 100}'
//	sarama BOOTSTRAP consume '{"topic": "t", "group": "g", "count": 100, "members": 2, "second_from": 10}'
//	sarama BOOTSTRAP admin   '{"topic": "t", "group": "g"}'
package main

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"tidelog.tests/kafkaclients/scenario"
)

func main() {
	scenario.Main(map[string]func(string, scenario.Args) any{
		"produce": produce,
		"consume": consume,
		"admin":   admin,
	})
}

// partitionZero is config() with the partitioner that honours a message's Partition.
func partitionZero() *sarama.Config {
	c := config()
	c.Producer.Partitioner = sarama.NewManualPartitioner
	return c
}

func config() *sarama.Config {
	c := sarama.NewConfig()
	c.Producer.Return.Successes = true // SyncProducer refuses a config without it
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	return c
}

// produce sends records k<n>/v<n> with a header in one SendMessages (sarama's hash
// partitioner) and answers where each landed: [partition, offset, key].
func produce(bootstrap string, a scenario.Args) any {
	p, err := sarama.NewSyncProducer([]string{bootstrap}, config())
	if err != nil {
		return map[string]any{"records": [][]any{}, "errors": []string{err.Error()}}
	}
	defer p.Close()
	msgs := []*sarama.ProducerMessage{}
	for n := a.From; n < a.From+a.Count; n++ {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: a.Topic, Key: sarama.StringEncoder(scenario.Key(n)),
			Value:   sarama.StringEncoder(scenario.Value(n)),
			Headers: []sarama.RecordHeader{{Key: []byte("n"), Value: []byte(scenario.Key(n))}}})
	}
	errs := []string{}
	failed := map[*sarama.ProducerMessage]bool{}
	if err := p.SendMessages(msgs); err != nil {
		var perrs sarama.ProducerErrors
		if !errors.As(err, &perrs) {
			perrs = sarama.ProducerErrors{{Err: err}}
		}
		for _, e := range perrs {
			failed[e.Msg] = true
			errs = append(errs, e.Err.Error())
		}
	}
	landed := [][]any{}
	for i, m := range msgs {
		if !failed[m] {
			landed = append(landed, []any{m.Partition, m.Offset, scenario.Key(a.From + i)})
		}
	}
	return map[string]any{"records": landed, "errors": errs}
}

type handler struct {
	member int
	seen   *scenario.Seen
}

func (handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h handler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			h.seen.Add(h.member, m.Partition, m.Offset, m.Key, m.Value)
			s.MarkMessage(m, "")
			h.seen.Pause(h.member, s.Context().Done())
		case <-s.Context().Done():
			return nil
		}
	}
}

// consume runs `members` members of one group (the second joining once `second_from`
// records were seen) until `count` distinct records were consumed, then closes them:
// what they marked is committed (autocommit, and on close), and a restart resumes there.
func consume(bootstrap string, a scenario.Args) any {
	seen := scenario.NewSeen(a)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := []string{}
	failed := func(err error) {
		if ctx.Err() == nil {
			mu.Lock()
			errs = append(errs, err.Error())
			mu.Unlock()
		}
	}
	for m := 0; m < a.Members; m++ {
		wg.Add(1)
		go func(member int) {
			defer wg.Done()
			if member > 0 {
				select {
				case <-seen.Second:
				case <-ctx.Done():
					return
				}
			}
			group, err := sarama.NewConsumerGroup([]string{bootstrap}, a.Group, config())
			if err != nil {
				failed(err)
				return
			}
			defer group.Close()
			for ctx.Err() == nil {
				if err := group.Consume(ctx, []string{a.Topic}, handler{member, seen}); err != nil {
					failed(err)
					time.Sleep(100 * time.Millisecond) // sarama's own retry backoff, as a loop would
				}
			}
		}(m)
	}
	complete := seen.Wait()
	cancel()
	wg.Wait()
	return seen.Result(complete, errs)
}

// admin runs ClusterAdmin's calls the Kafka guide claims, in order, on a topic and group of
// its own (ListTopics first: it once broke the connection for the calls after it).
func admin(bootstrap string, a scenario.Args) any {
	steps := map[string]any{}
	client, err := sarama.NewClient([]string{bootstrap}, config())
	if err != nil {
		return map[string]any{"client": err.Error()}
	}
	defer client.Close()
	adm, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return map[string]any{"cluster_admin": err.Error()}
	}
	t, g := a.Topic, a.Group
	err = adm.CreateTopic(t, &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}, false)
	steps["create_topic"] = scenario.Err(err)
	steps["list_topics"] = partitionsOf(adm, t, 2)
	steps["create_partitions"] = scenario.Err(adm.CreatePartitions(t, 3, nil, false))
	steps["after_create_partitions"] = partitionsOf(adm, t, 3)
	described, err := adm.DescribeTopics([]string{t})
	if err == nil && len(described) == 1 {
		steps["describe_topics"] = []any{described[0].Err.Error(), len(described[0].Partitions)}
	} else {
		steps["describe_topics"] = scenario.Err(err)
	}
	steps["describe_config"] = topicConfigs(adm, t)
	hour, day := "3600000", "86400000"
	steps["alter_config"] = scenario.Err(adm.AlterConfig(sarama.TopicResource, t, map[string]*string{"retention.ms": &day}, false))
	steps["after_alter_config"] = topicConfigs(adm, t)
	steps["incremental_alter_config"] = scenario.Err(adm.IncrementalAlterConfig(sarama.TopicResource, t,
		map[string]sarama.IncrementalAlterConfigsEntry{"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &hour}}, false))
	steps["after_incremental_alter_config"] = topicConfigs(adm, t)

	producer, err := sarama.NewSyncProducer([]string{bootstrap}, partitionZero())
	if err == nil {
		for n := 0; n < 10; n++ {
			_, _, err = producer.SendMessage(&sarama.ProducerMessage{Topic: t, Partition: 0, Value: sarama.StringEncoder(scenario.Value(n))})
		}
		_ = producer.Close()
	}
	steps["produce"] = scenario.Err(err)
	steps["get_offset"] = offsetsOf(client, t)
	steps["delete_records"] = scenario.Err(adm.DeleteRecords(t, map[int32]int64{0: 3}))
	steps["after_delete_records"] = offsetsOf(client, t)

	steps["commit"] = commit(client, g, t)
	steps["list_consumer_group_offsets"] = groupOffsets(adm, g, t)
	listed, err := adm.ListConsumerGroups()
	steps["list_consumer_groups"] = []any{scenario.Err(err), listed[g]}
	groups, err := adm.DescribeConsumerGroups([]string{g})
	if err == nil && len(groups) == 1 {
		steps["describe_consumer_groups"] = []any{groups[0].Err.Error(), groups[0].State, groups[0].ProtocolType, len(groups[0].Members)}
	} else {
		steps["describe_consumer_groups"] = scenario.Err(err)
	}
	steps["delete_consumer_group_offset"] = scenario.Err(adm.DeleteConsumerGroupOffset(g, t, 0))
	steps["after_delete_consumer_group_offset"] = groupOffsets(adm, g, t)
	steps["delete_consumer_group"] = scenario.Err(adm.DeleteConsumerGroup(g))
	listed, err = adm.ListConsumerGroups()
	_, still := listed[g]
	steps["after_delete_consumer_group"] = []any{scenario.Err(err), still}
	brokers, controller, err := adm.DescribeCluster()
	steps["describe_cluster"] = []any{scenario.Err(err), len(brokers), len(brokers) == 1 && controller == brokers[0].ID()}
	steps["delete_topic"] = scenario.Err(adm.DeleteTopic(t))
	steps["after_delete_topic"] = gone(adm, t)
	return steps
}

// partitionsOf lists the topics until `t` has `want` partitions (Kafka's brokers learn of
// a change from the controller a moment after it is answered), or for 10 s.
func partitionsOf(adm sarama.ClusterAdmin, t string, want int) any {
	deadline := time.Now().Add(10 * time.Second)
	for {
		topics, err := adm.ListTopics()
		if err != nil {
			return err.Error()
		}
		detail, ok := topics[t]
		if ok && int(detail.NumPartitions) == want || time.Now().After(deadline) {
			return []any{ok, detail.NumPartitions, detail.ConfigEntries["retention.ms"] != nil}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func topicConfigs(adm sarama.ClusterAdmin, t string) any {
	entries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: t})
	if err != nil {
		return err.Error()
	}
	values := map[string]any{}
	for _, e := range entries {
		if e.Name == "retention.ms" || e.Name == "cleanup.policy" {
			values[e.Name] = []any{e.Value, e.Default, e.Source.String()}
		}
	}
	return values
}

func offsetsOf(client sarama.Client, t string) any {
	first, err1 := client.GetOffset(t, 0, sarama.OffsetOldest)
	next, err2 := client.GetOffset(t, 0, sarama.OffsetNewest)
	return []any{first, next, scenario.Err(err1), scenario.Err(err2)}
}

// commit sets the group's offset of partition 0 to 5 with metadata, through an offset manager.
func commit(client sarama.Client, g, t string) any {
	om, err := sarama.NewOffsetManagerFromClient(g, client)
	if err != nil {
		return err.Error()
	}
	defer om.Close()
	pom, err := om.ManagePartition(t, 0)
	if err != nil {
		return err.Error()
	}
	pom.MarkOffset(5, "sarama")
	om.Commit()
	if err := pom.Close(); err != nil {
		return err.Error()
	}
	return nil
}

func groupOffsets(adm sarama.ClusterAdmin, g, t string) any {
	fetched, err := adm.ListConsumerGroupOffsets(g, map[string][]int32{t: {0, 1, 2}})
	if err != nil {
		return err.Error()
	}
	out := [][]any{}
	for p, b := range fetched.Blocks[t] {
		out = append(out, []any{p, b.Offset, b.Metadata, b.Err.Error()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0].(int32) < out[j][0].(int32) })
	return out
}

func gone(adm sarama.ClusterAdmin, t string) any {
	deadline := time.Now().Add(10 * time.Second)
	for {
		topics, err := adm.ListTopics()
		if err != nil {
			return err.Error()
		}
		if _, ok := topics[t]; !ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
