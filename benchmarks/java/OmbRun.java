import io.openmessaging.benchmark.utils.distributor.KeyDistributorType;
import io.openmessaging.benchmark.utils.payload.FilePayloadReader;
import io.openmessaging.benchmark.worker.LocalWorker;
import io.openmessaging.benchmark.worker.commands.ConsumerAssignment;
import io.openmessaging.benchmark.worker.commands.CountersStats;
import io.openmessaging.benchmark.worker.commands.CumulativeLatencies;
import io.openmessaging.benchmark.worker.commands.PeriodStats;
import io.openmessaging.benchmark.worker.commands.ProducerWorkAssignment;
import io.openmessaging.benchmark.worker.commands.TopicSubscription;
import io.openmessaging.benchmark.worker.commands.TopicsInfo;
import java.io.File;
import java.util.List;
import java.util.UUID;
import org.HdrHistogram.Histogram;

/**
 * One OpenMessaging Benchmark run through OMB's own LocalWorker and Kafka driver, with phases in seconds.
 *
 * <p>Arguments: driver yaml, partitions, message size, payload file, publish rate (msg/s), warm-up seconds, test
 * seconds. It does what OMB's WorkloadGenerator does for a workload of one topic, one producer and one consumer
 * (create the topic, the consumer, the producer; probe until the consumer has a record; load at the rate; warm up;
 * reset the stats; measure), but the generator's phases are whole minutes and a benchmark run here has seconds.
 * Prints one line, "omb-result: " and a JSON object: the run's topic, the measured window's publish and consume
 * rates and the publish and end-to-end latency percentiles (milliseconds) of OMB's histograms.
 */
public final class OmbRun {
    private static final long PROBE_TIMEOUT_MS = 60_000;
    // OMB's log4j configuration logs to stdout too: the result is the line that starts with this.
    private static final String RESULT_PREFIX = "omb-result: ";

    private OmbRun() {}

    public static void main(String[] args) throws Exception {
        File driver = new File(args[0]);
        int partitions = Integer.parseInt(args[1]);
        int messageSize = Integer.parseInt(args[2]);
        String payloadFile = args[3];
        double rate = Double.parseDouble(args[4]);
        long warmUpMs = (long) (Double.parseDouble(args[5]) * 1000);
        long testMs = (long) (Double.parseDouble(args[6]) * 1000);

        LocalWorker worker = new LocalWorker();
        worker.initializeDriver(driver);
        List<String> topics = worker.createTopics(new TopicsInfo(1, partitions));
        ConsumerAssignment assignment = new ConsumerAssignment();
        assignment.topicsSubscriptions.add(new TopicSubscription(topics.get(0), "sub-" + UUID.randomUUID()));
        worker.createConsumers(assignment);
        worker.createProducers(topics);

        // As WorkloadGenerator.ensureTopicsAreReady: a Kafka consumer is assigned its partitions only once it
        // polls, so one probe record must come back before the load starts.
        worker.probeProducers();
        long deadline = System.currentTimeMillis() + PROBE_TIMEOUT_MS;
        while (worker.getCountersStats().messagesReceived < 1) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the consumer received no probe record in 60 s");
            }
            Thread.sleep(100);
        }

        ProducerWorkAssignment work = new ProducerWorkAssignment();
        work.keyDistributorType = KeyDistributorType.NO_KEY;
        work.publishRate = rate;
        work.payloadData = List.of(new FilePayloadReader(messageSize).load(payloadFile));
        worker.startLoad(work);
        Thread.sleep(warmUpMs);

        worker.resetStats();
        worker.getPeriodStats();
        long started = System.nanoTime();
        Thread.sleep(testMs);
        PeriodStats period = worker.getPeriodStats();
        double elapsedS = (System.nanoTime() - started) / 1e9;
        CumulativeLatencies latencies = worker.getCumulativeLatencies();
        CountersStats totals = worker.getCountersStats();

        StringBuilder json = new StringBuilder(RESULT_PREFIX + "{");
        json.append("\"topic\": \"").append(topics.get(0)).append('"');
        json.append(", \"seconds\": ").append(elapsedS);
        json.append(", \"publish_msgs_s\": ").append(period.messagesSent / elapsedS);
        json.append(", \"publish_mb_s\": ").append(period.bytesSent / elapsedS / 1024 / 1024);
        json.append(", \"consume_msgs_s\": ").append(period.messagesReceived / elapsedS);
        json.append(", \"consume_mb_s\": ").append(period.bytesReceived / elapsedS / 1024 / 1024);
        json.append(", \"publish_errors\": ").append(period.messageSendErrors);
        json.append(", \"total_sent\": ").append(totals.messagesSent);
        json.append(", \"total_received\": ").append(totals.messagesReceived);
        append(json, "publish", latencies.publishLatency);
        append(json, "e2e", latencies.endToEndLatency);
        json.append("}");
        System.out.println(json);
        System.out.flush();
        // No stopAll: the producer's close would first send what its 32 MiB buffer holds, half a minute at the
        // 1 MB/s of a loaded machine, for records nobody measures. The topic and group are this run's alone (the
        // caller deletes the topic).
        System.exit(0);
    }

    /**
     * p50, p99 and p99.9 of a histogram of microseconds, in milliseconds, and its distribution as "NAME_cdf":
     * [percentile, milliseconds] pairs from p1 to p99.99, what a latency CDF plot draws.
     */
    private static void append(StringBuilder json, String name, Histogram histogram) {
        double[] percentiles = {50, 99, 99.9};
        String[] keys = {"p50", "p99", "p999"};
        for (int i = 0; i < percentiles.length; i++) {
            double ms = histogram.getValueAtPercentile(percentiles[i]) / 1000.0;
            json.append(", \"").append(name).append('_').append(keys[i]).append("_ms\": ").append(ms);
        }
        double[] cdf = {1, 5, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.99};
        json.append(", \"").append(name).append("_cdf\": [");
        for (int i = 0; i < cdf.length; i++) {
            double ms = histogram.getValueAtPercentile(cdf[i]) / 1000.0;
            json.append(i == 0 ? "" : ", ").append('[').append(cdf[i]).append(", ").append(ms).append(']');
        }
        json.append(']');
    }
}
