import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Transactional produce with Kafka's Java client and its defaults (acks=all, idempotent, linger.ms 5): `transactions`
 * transactions of `records` records of `valueBytes` bytes into partition 0 of `topic`, each committed. Against a
 * cluster that finalized transaction.version 2 the client speaks transactions v2. Prints "RATE r": records/s from
 * the first beginTransaction to the last commit's answer (initTransactions excluded).
 * Arguments: bootstrap servers, topic, transactional id, transactions, records, value bytes.
 */
public class TransactionalProducer {
    public static void main(String[] args) {
        String bootstrap = args[0];
        String topic = args[1];
        String transactionalId = args[2];
        int transactions = Integer.parseInt(args[3]);
        int records = Integer.parseInt(args[4]);
        byte[] value = new byte[Integer.parseInt(args[5])];
        Properties properties = new Properties();
        properties.put("bootstrap.servers", bootstrap);
        properties.put("transactional.id", transactionalId);
        properties.put("key.serializer", ByteArraySerializer.class.getName());
        properties.put("value.serializer", ByteArraySerializer.class.getName());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(properties)) {
            producer.initTransactions();
            long start = System.nanoTime();
            for (int t = 0; t < transactions; t++) {
                producer.beginTransaction();
                for (int r = 0; r < records; r++) {
                    producer.send(new ProducerRecord<>(topic, 0, null, value));
                }
                // Without it Kafka's Java client 4.x (transactions v2) may send EndTxn ahead of the batches and have
                // the commit refused as empty, on Kafka as on raybroker (see docs/clients.md).
                producer.flush();
                producer.commitTransaction();
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            System.out.println("RATE " + (transactions * (long) records) / seconds);
        }
    }
}
