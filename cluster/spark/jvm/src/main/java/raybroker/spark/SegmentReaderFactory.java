package raybroker.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Makes each task's columnar reader on the executor; the columns are those the query reads. */
final class SegmentReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;
  private final String[] columns;
  private final int batchRows;

  SegmentReaderFactory(String[] columns, int batchRows) {
    this.columns = columns;
    this.batchRows = batchRows;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new SegmentReader((ReadPlan.Task) partition, columns, batchRows);
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    throw new UnsupportedOperationException("raybroker segments are read as columnar batches only");
  }
}
