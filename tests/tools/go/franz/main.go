// franz-go (kgo and kadm) with its defaults, as tests/kafka/test_clients_go.py drives it:
//
//	franz BOOTSTRAP produce '{"topic": "t", "from": 0, "count": 100}'
//	franz BOOTSTRAP consume '{"topic": "t", "group": "g", "count": 100, "members": 2, "second_from": 10}'
//	franz BOOTSTRAP admin   '{"topic": "t", "group": "g"}'
package main

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"tidelog.tests/kafkaclients/scenario"
)

func main() {
	scenario.Main(map[string]func(string, scenario.Args) any{
		"produce": produce,
		"consume": consume,
		"admin":   admin,
	})
}

func client(bootstrap string, opts ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(bootstrap)}, opts...)...)
	if err != nil {
		panic(err)
	}
	return cl
}

// produce sends records k<n>/v<n> with a header, keyed (the default partitioner), and
// answers where each landed: [partition, offset, key].
func produce(bootstrap string, a scenario.Args) any {
	cl := client(bootstrap)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(a.TimeoutS)*time.Second)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	landed := [][]any{}
	errs := []string{}
	for n := a.From; n < a.From+a.Count; n++ {
		r := &kgo.Record{Topic: a.Topic, Key: []byte(scenario.Key(n)), Value: []byte(scenario.Value(n)),
			Headers: []kgo.RecordHeader{{Key: "n", Value: []byte(scenario.Key(n))}}}
		wg.Add(1)
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err.Error())
				return
			}
			landed = append(landed, []any{r.Partition, r.Offset, string(r.Key)})
		})
	}
	wg.Wait()
	return map[string]any{"records": landed, "errors": errs}
}

// consume runs `members` members of one group (the second joining once `second_from`
// records were seen) until `count` distinct records were consumed, then closes them:
// autocommit's commit on leaving is what a restarted member resumes from.
func consume(bootstrap string, a scenario.Args) any {
	seen := scenario.NewSeen(a)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := []string{}
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
			cl := client(bootstrap, kgo.ConsumerGroup(a.Group), kgo.ConsumeTopics(a.Topic))
			defer cl.Close()
			for ctx.Err() == nil {
				fetches := cl.PollRecords(ctx, 500) // a batch at a time, as an application processes them
				fetches.EachError(func(t string, p int32, err error) {
					if ctx.Err() == nil {
						mu.Lock()
						errs = append(errs, err.Error())
						mu.Unlock()
					}
				})
				fetches.EachRecord(func(r *kgo.Record) {
					seen.Add(member, r.Partition, r.Offset, r.Key, r.Value)
				})
				seen.Pause(member, ctx.Done())
			}
		}(m)
	}
	complete := seen.Wait()
	cancel()
	wg.Wait()
	return seen.Result(complete, errs)
}

// admin runs every kadm call the Kafka guide claims, in order, on a topic and group of
// its own; each step's answer as the values the test compares (errors as their text).
func admin(bootstrap string, a scenario.Args) any {
	cl := client(bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(a.TimeoutS)*time.Second)
	defer cancel()
	t, g := a.Topic, a.Group
	steps := map[string]any{}

	made, err := adm.CreateTopics(ctx, 2, 1, nil, t)
	steps["create_topics"] = []any{scenario.Err(err), scenario.Err(made[t].Err), made[t].NumPartitions}
	steps["list_topics"] = partitionsOf(adm, ctx, t, 2)
	grown, err := adm.UpdatePartitions(ctx, 3, t)
	steps["create_partitions"] = []any{scenario.Err(err), scenario.Err(grown[t].Err)}
	steps["after_create_partitions"] = partitionsOf(adm, ctx, t, 3)
	steps["describe_configs"] = topicConfigs(adm, ctx, t)
	hour := "3600000"
	altered, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: &hour}}, t)
	steps["incremental_alter_configs"] = []any{scenario.Err(err), alterErrs(altered)}
	steps["after_alter_configs"] = topicConfigs(adm, ctx, t)

	for n := 0; n < 10; n++ {
		r := &kgo.Record{Topic: t, Partition: 0, Value: []byte(scenario.Value(n))}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			steps["produce"] = err.Error()
		}
	}
	steps["list_offsets"] = offsetsOf(adm, ctx, t)
	deleted, err := adm.DeleteRecords(ctx, kadm.Offsets{t: {0: {Topic: t, Partition: 0, At: 3, LeaderEpoch: -1}}})
	if err == nil {
		d, _ := deleted.Lookup(t, 0)
		steps["delete_records"] = []any{scenario.Err(d.Err), d.LowWatermark}
	} else {
		steps["delete_records"] = err.Error()
	}
	steps["after_delete_records"] = offsetsOf(adm, ctx, t)

	committed, err := adm.CommitOffsets(ctx, g, kadm.Offsets{t: {0: {Topic: t, Partition: 0, At: 5, LeaderEpoch: -1, Metadata: "franz"}}})
	c, _ := committed.Lookup(t, 0)
	steps["commit_offsets"] = []any{scenario.Err(err), scenario.Err(c.Err)}
	steps["fetch_offsets"] = fetchOffsets(adm, ctx, g)
	listed, err := adm.ListGroups(ctx)
	steps["list_groups"] = []any{scenario.Err(err), listed[g].Group == g, listed[g].ProtocolType, listed[g].State}
	described, err := adm.DescribeGroups(ctx, g)
	d := described[g]
	steps["describe_groups"] = []any{scenario.Err(err), scenario.Err(d.Err), d.State, d.ProtocolType, len(d.Members)}
	lag, err := adm.Lag(ctx, g)
	steps["lag"] = []any{scenario.Err(err), lag[g].Lag.Total()}
	offDeleted, err := adm.DeleteOffsets(ctx, g, kadm.TopicsSet{t: {0: {}}})
	steps["delete_offsets"] = []any{scenario.Err(err), scenario.Err(offDeleted.Error())}
	steps["after_delete_offsets"] = fetchOffsets(adm, ctx, g)
	groupDeleted, err := adm.DeleteGroups(ctx, g)
	steps["delete_groups"] = []any{scenario.Err(err), scenario.Err(groupDeleted[g].Err)}
	listed, err = adm.ListGroups(ctx)
	_, still := listed[g]
	steps["after_delete_groups"] = []any{scenario.Err(err), still}
	meta, err := adm.BrokerMetadata(ctx)
	steps["broker_metadata"] = []any{scenario.Err(err), len(meta.Brokers), meta.Controller == meta.Brokers[0].NodeID}
	topicDeleted, err := adm.DeleteTopics(ctx, t)
	steps["delete_topics"] = []any{scenario.Err(err), scenario.Err(topicDeleted[t].Err)}
	steps["after_delete_topics"] = gone(adm, ctx, t)
	return steps
}

// partitionsOf lists the topics until `t` has `want` partitions (Kafka's brokers learn of
// a change from the controller a moment after it is answered), or for 10 s.
func partitionsOf(adm *kadm.Client, ctx context.Context, t string, want int) any {
	deadline := time.Now().Add(10 * time.Second)
	for {
		topics, err := adm.ListTopics(ctx)
		if err != nil {
			return err.Error()
		}
		detail, ok := topics[t]
		if ok && len(detail.Partitions) == want || time.Now().After(deadline) {
			return []any{ok, scenario.Err(detail.Err), len(detail.Partitions)}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func topicConfigs(adm *kadm.Client, ctx context.Context, t string) any {
	rcs, err := adm.DescribeTopicConfigs(ctx, t)
	if err != nil {
		return err.Error()
	}
	rc, err := rcs.On(t, nil)
	if err != nil {
		return err.Error()
	}
	values := map[string]any{"err": scenario.Err(rc.Err)}
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" || c.Key == "cleanup.policy" {
			values[c.Key] = []any{c.MaybeValue(), c.Source.String()}
		}
	}
	return values
}

func alterErrs(rs kadm.AlterConfigsResponses) []any {
	out := []any{}
	for _, r := range rs {
		out = append(out, scenario.Err(r.Err))
	}
	return out
}

func offsetsOf(adm *kadm.Client, ctx context.Context, t string) any {
	start, err1 := adm.ListStartOffsets(ctx, t)
	end, err2 := adm.ListEndOffsets(ctx, t)
	if err1 != nil || err2 != nil {
		return []any{scenario.Err(err1), scenario.Err(err2)}
	}
	s, _ := start.Lookup(t, 0)
	e, _ := end.Lookup(t, 0)
	return []any{s.Offset, e.Offset}
}

func fetchOffsets(adm *kadm.Client, ctx context.Context, g string) any {
	fetched, err := adm.FetchOffsets(ctx, g)
	if err != nil {
		return err.Error()
	}
	out := [][]any{}
	for _, ps := range fetched { // one topic
		for p, o := range ps {
			out = append(out, []any{p, o.At, o.Metadata, scenario.Err(o.Err)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0].(int32) < out[j][0].(int32) })
	return out
}

// gone polls the topic list until `t` is not in it (Kafka's brokers learn of a deletion
// from the controller a moment after DeleteTopics answers).
func gone(adm *kadm.Client, ctx context.Context, t string) any {
	deadline := time.Now().Add(10 * time.Second)
	for {
		topics, err := adm.ListTopics(ctx)
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
