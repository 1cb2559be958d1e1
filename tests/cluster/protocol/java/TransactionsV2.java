import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A transactional producer of Kafka's Java client with its defaults, which speaks transactions v2 to a cluster that
 * finalized transaction.version 2: each transaction writes a record to each partition of its topic and commits an
 * offset for its group, every third is aborted. Then a read_committed consumer reads the topic and the group's
 * committed offset is read back. Prints a line each: "COMMITTED i" / "ABORTED i", "VALUE v", "OFFSET partition n".
 * Arguments: bootstrap servers, topic, partitions, transactional id, group id, transactions.
 */
public class TransactionsV2 {
    public static void main(String[] args) {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        String transactionalId = args[3];
        String group = args[4];
        int transactions = Integer.parseInt(args[5]);
        Properties producerProperties = new Properties();
        producerProperties.put("bootstrap.servers", bootstrap);
        producerProperties.put("transactional.id", transactionalId);
        producerProperties.put("key.serializer", StringSerializer.class.getName());
        producerProperties.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProperties)) {
            producer.initTransactions();
            for (int i = 0; i < transactions; i++) {
                producer.beginTransaction();
                for (int p = 0; p < partitions; p++) {
                    producer.send(new ProducerRecord<>(topic, p, null, "t" + i + "-p" + p));
                }
                Map<TopicPartition, OffsetAndMetadata> offsets =
                    Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(i + 1));
                producer.sendOffsetsToTransaction(offsets, new ConsumerGroupMetadata(group));
                if (i % 3 == 2) {
                    producer.abortTransaction();
                    System.out.println("ABORTED " + i);
                } else {
                    producer.commitTransaction();
                    System.out.println("COMMITTED " + i);
                }
            }
        }
        Properties consumerProperties = new Properties();
        consumerProperties.put("bootstrap.servers", bootstrap);
        consumerProperties.put("group.id", group);
        consumerProperties.put("isolation.level", "read_committed");
        consumerProperties.put("enable.auto.commit", "false");
        consumerProperties.put("key.deserializer", StringDeserializer.class.getName());
        consumerProperties.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProperties)) {
            List<TopicPartition> assigned = new ArrayList<>();
            for (int p = 0; p < partitions; p++) {
                assigned.add(new TopicPartition(topic, p));
            }
            consumer.assign(assigned);
            consumer.seekToBeginning(assigned);
            Map<TopicPartition, Long> ends = consumer.endOffsets(assigned);
            long deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println("VALUE " + record.value());
                }
                boolean done = true;
                for (TopicPartition partition : assigned) {
                    done &= consumer.position(partition) >= ends.get(partition);
                }
                if (done) {
                    break;
                }
            }
            for (Map.Entry<TopicPartition, OffsetAndMetadata> entry : consumer.committed(Set.copyOf(assigned)).entrySet()) {
                if (entry.getValue() != null) {
                    System.out.println("OFFSET " + entry.getKey().partition() + " " + entry.getValue().offset());
                }
            }
        }
        System.out.println("DONE");
    }
}
