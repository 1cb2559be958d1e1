import java.util.*;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.errors.TransactionAbortedException;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A transactional producer pipelining its Produce requests as Kafka's Java client does by default (acks=all,
 * max.in.flight.requests.per.connection=5, linger.ms=5): transactions of RECORDS records over the topic's
 * partitions, every third one aborted (often with batches in flight), until SECONDS have passed or TRANSACTIONS
 * transactions ended; a commit flushes first.
 *
 * Arguments: bootstrap topic transactionalId records seconds transactions. Values are "t<transaction>-<index>"; the
 * key is the index, so the records of a transaction spread over every partition. Prints one line per ended
 * transaction, "commit <t>" or "abort <t>", then "done <count>"; any send or transaction failure prints "failed
 * <exception>" and exits 1.
 */
public class PipelinedTransactions {
    static final String PAD = " ".repeat(100);
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], transactionalId = args[2];
        int records = Integer.parseInt(args[3]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[4]) * 1000;
        int transactions = Integer.parseInt(args[5]);
        boolean keyed = args.length <= 6 || !args[6].equals("unkeyed");
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", transactionalId);
        p.put("acks", "all");
        p.put("linger.ms", "5");
        p.put("max.in.flight.requests.per.connection", "5");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        AtomicReference<Exception> failure = new AtomicReference<>();
        int ended = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            for (int t = 0; t < transactions && System.currentTimeMillis() < deadline; t++) {
                producer.beginTransaction();
                for (int i = 0; i < records; i++) {
                    producer.send(new ProducerRecord<>(topic, keyed ? Integer.toString(i) : null, "t" + t + "-" + i + PAD), (metadata, e) -> {
                        if (e != null && !(e instanceof TransactionAbortedException)) failure.compareAndSet(null, e);
                    });
                }
                boolean abort = t % 3 == 1;
                if (abort) {
                    producer.abortTransaction();
                } else {
                    // Kafka's Java client 4.x with transactions v2 may send EndTxn ahead of the transaction's batches
                    // when commitTransaction follows the last send at once (its Sender reads whether batches are
                    // pending before it takes the transaction manager's lock); Kafka, as raybroker, then refuses
                    // the commit of a transaction with no partition (INVALID_TXN_STATE). flush() rules that out.
                    producer.flush();
                    producer.commitTransaction();
                }
                if (failure.get() != null) {
                    throw failure.get();
                }
                System.out.println((abort ? "abort " : "commit ") + t);
                ended++;
            }
        } catch (Exception e) {
            System.out.println("failed " + e);
            System.exit(1);
        }
        System.out.println("done " + ended);
    }
}
