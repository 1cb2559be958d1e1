import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * A stateful word count under exactly_once_v2: lines of the input topic are split into words, re-keyed by word
 * (through the repartition topic "<application.id>-words-repartition"), counted in the store "counts" (changelogged
 * to "<application.id>-counts-changelog", cache off so that every input word yields one update), and every new count
 * goes to the output topic as (word, decimal count).
 *
 * <p>Arguments: bootstrap servers, application.id, input topic, output topic, state dir. Prints "STATE before ->
 * after" on every state change; a fatal error in a stream thread prints "FATAL" and its stack trace and exits 1.
 * SIGTERM closes the application cleanly (exit 0), after printing "METRIC group name value" for the clients' metrics
 * that say where a run's time went (commit and transaction latencies, request latencies, fetch waits).
 */
public class StreamsWordCount {
    public static void main(String[] args) throws Exception {
        // Before the first logger exists: Kafka's INFO lines (every config, every rebalance) would bury the errors.
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        System.setProperty("org.slf4j.simpleLogger.showDateTime", "true");
        String bootstrap = args[0], applicationId = args[1], input = args[2], output = args[3], stateDir = args[4];

        Properties config = new Properties();
        config.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        config.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        config.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        config.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        config.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        config.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        config.put("statestore.cache.max.bytes", 0);
        // The instance killed by the test stays a member until its session expires; the restarted one's rebalance
        // waits for that, so the shortest session a broker accepts by default (group.min.session.timeout.ms).
        config.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
        config.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);
        // Streams' default under exactly-once is 100 ms, the commit interval: the records of a transaction would
        // reach the broker only when it commits, and a crash would seldom leave any to abort.
        config.put(StreamsConfig.producerPrefix("linger.ms"), 5);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.split(" ")))
                .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
                .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts")
                        .withKeySerde(Serdes.String())
                        .withValueSerde(Serdes.Long())
                        .withCachingDisabled())
                .toStream()
                .mapValues(count -> Long.toString(count))
                .to(output, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), config);
        CountDownLatch stopped = new CountDownLatch(1);
        boolean[] failed = {false};
        streams.setStateListener((after, before) -> {
            System.out.println("STATE " + before + " -> " + after);
            System.out.flush();
            if (after == KafkaStreams.State.ERROR || after == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(exception -> {
            System.out.println("FATAL " + exception);
            exception.printStackTrace(System.out);
            System.out.flush();
            failed[0] = true;
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            printMetrics(streams);
            streams.close(Duration.ofSeconds(10));
        }));
        streams.start();
        stopped.await();
        streams.close(Duration.ofSeconds(10));
        System.exit(failed[0] ? 1 : 0);
    }

    private static final java.util.Set<String> TIMED = java.util.Set.of(
            "commit-latency-avg", "commit-latency-max", "commit-rate", "poll-latency-avg", "process-latency-avg",
            "punctuate-latency-avg", "process-rate", "txn-init-time-ns-total", "txn-begin-time-ns-total",
            "txn-send-offsets-time-ns-total", "txn-commit-time-ns-total", "txn-abort-time-ns-total",
            "flush-time-ns-total", "request-latency-avg", "request-latency-max", "fetch-latency-avg",
            "fetch-latency-max", "fetch-size-avg", "records-per-request-avg", "batch-size-avg", "record-queue-time-avg",
            "produce-throttle-time-avg", "request-rate", "io-wait-ratio", "io-ratio");

    private static void printMetrics(KafkaStreams streams) {
        streams.metrics().forEach((name, metric) -> {
            if (TIMED.contains(name.name())) {
                System.out.println("METRIC " + name.group() + " " + name.name() + " " + name.tags().getOrDefault("client-id", "") + " " + metric.metricValue());
            }
        });
        System.out.flush();
    }
}
